//! Who benchmarked what: the identity fields of the report, from flags and InferenceX's environment.

use super::*;

/// Prefill and decode topology of a multinode (disaggregated) deployment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Multinode {
    pub prefill_num_workers: u64,
    pub prefill_tp: u64,
    pub prefill_ep: u64,
    pub prefill_dp_attention: bool,
    pub decode_num_workers: u64,
    pub decode_tp: u64,
    pub decode_ep: u64,
    pub decode_dp_attention: bool,
}

/// Who was benchmarked (domain §5.2 identity keys), from flags or InferenceX's environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub hw: String,
    pub conc: Option<u64>,
    pub image: String,
    pub model: String,
    pub model_prefix: String,
    pub framework: String,
    pub precision: String,
    pub spec_decoding: String,
    pub disagg: bool,
    pub tp: u64,
    pub ep: u64,
    pub dp_attention: bool,
    pub offloading: String,
    /// `Some` when `IS_MULTINODE` is true.
    pub multinode: Option<Multinode>,
    /// Pipeline parallelism (default 1).
    pub pp: u64,
    /// Decode context parallelism (default 1; shares the TP GPUs).
    pub dcp_size: u64,
    /// Prefill context parallelism (default 1).
    pub pcp_size: u64,
    /// Nested-layout identity strings, null when not given.
    pub recipe_fingerprint: Option<String>,
    pub kv_offload_backend: Option<String>,
    pub allocated_cpu_dram_gb: Option<String>,
    pub router: Option<String>,
    pub kv_p2p_transfer: Option<String>,
    pub prefill_hw: Option<String>,
    pub decode_hw: Option<String>,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            hw: String::new(),
            conc: None,
            image: String::new(),
            model: String::new(),
            model_prefix: String::new(),
            framework: String::new(),
            precision: String::new(),
            spec_decoding: "none".into(),
            disagg: false,
            tp: 1,
            ep: 1,
            dp_attention: false,
            offloading: "none".into(),
            multinode: None,
            pp: 1,
            dcp_size: 1,
            pcp_size: 1,
            recipe_fingerprint: None,
            kv_offload_backend: None,
            allocated_cpu_dram_gb: None,
            router: None,
            kv_p2p_transfer: None,
            prefill_hw: None,
            decode_hw: None,
        }
    }
}

/// Raw identity values as given (flag or environment); empty strings count as unset.
#[derive(Debug, Clone, Default)]
pub struct IdentityInput {
    pub hw: Option<String>,
    pub conc: Option<String>,
    pub image: Option<String>,
    pub model: Option<String>,
    pub model_prefix: Option<String>,
    pub framework: Option<String>,
    pub precision: Option<String>,
    pub spec_decoding: Option<String>,
    pub disagg: Option<String>,
    pub is_multinode: Option<String>,
    pub tp: Option<String>,
    pub ep: Option<String>,
    pub dp_attention: Option<String>,
    pub offloading: Option<String>,
    pub prefill_num_workers: Option<String>,
    pub prefill_tp: Option<String>,
    pub prefill_ep: Option<String>,
    pub prefill_dp_attention: Option<String>,
    pub decode_num_workers: Option<String>,
    pub decode_tp: Option<String>,
    pub decode_ep: Option<String>,
    pub decode_dp_attention: Option<String>,
    pub pp: Option<String>,
    pub dcp_size: Option<String>,
    pub pcp_size: Option<String>,
    pub recipe_fingerprint: Option<String>,
    pub kv_offload_backend: Option<String>,
    pub allocated_cpu_dram_gb: Option<String>,
    pub router: Option<String>,
    pub kv_p2p_transfer: Option<String>,
    pub prefill_hw: Option<String>,
    pub decode_hw: Option<String>,
}

pub(super) fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

pub(super) fn int_of(
    v: &Option<String>,
    default: u64,
    flag: &'static str,
    env: &'static str,
) -> Result<u64, ReportError> {
    match given(v) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| ReportError::Identity {
            flag,
            env,
            message: format!("{s:?} is not a non-negative integer"),
        }),
    }
}

pub(super) fn bool_of(
    v: &Option<String>,
    flag: &'static str,
    env: &'static str,
) -> Result<bool, ReportError> {
    match given(v).map(str::to_ascii_lowercase).as_deref() {
        None => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(other) => Err(ReportError::Identity {
            flag,
            env,
            message: format!("{other:?} is not a boolean; use true or false"),
        }),
    }
}

impl Identity {
    /// Resolves raw values with InferenceX's defaults (TP 1, EP 1, spec decoding "none", offloading
    /// "none", booleans false).
    pub fn resolve(i: &IdentityInput) -> Result<Identity, ReportError> {
        let s = |v: &Option<String>| given(v).unwrap_or_default().to_owned();
        let opt = |v: &Option<String>| given(v).map(str::to_owned);
        let is_multinode = bool_of(&i.is_multinode, "--is-multinode", "IS_MULTINODE")?;
        let multinode = if is_multinode {
            Some(Multinode {
                prefill_num_workers: int_of(
                    &i.prefill_num_workers,
                    0,
                    "--prefill-num-workers",
                    "PREFILL_NUM_WORKERS",
                )?,
                prefill_tp: int_of(&i.prefill_tp, 0, "--prefill-tp", "PREFILL_TP")?,
                prefill_ep: int_of(&i.prefill_ep, 1, "--prefill-ep", "PREFILL_EP")?,
                prefill_dp_attention: bool_of(
                    &i.prefill_dp_attention,
                    "--prefill-dp-attention",
                    "PREFILL_DP_ATTN",
                )?,
                decode_num_workers: int_of(
                    &i.decode_num_workers,
                    0,
                    "--decode-num-workers",
                    "DECODE_NUM_WORKERS",
                )?,
                decode_tp: int_of(&i.decode_tp, 0, "--decode-tp", "DECODE_TP")?,
                decode_ep: int_of(&i.decode_ep, 1, "--decode-ep", "DECODE_EP")?,
                decode_dp_attention: bool_of(
                    &i.decode_dp_attention,
                    "--decode-dp-attention",
                    "DECODE_DP_ATTN",
                )?,
            })
        } else {
            None
        };
        Ok(Identity {
            hw: s(&i.hw),
            conc: match given(&i.conc) {
                None => None,
                Some(_) => Some(int_of(&i.conc, 0, "--conc", "CONC")?),
            },
            image: s(&i.image),
            model: s(&i.model),
            model_prefix: s(&i.model_prefix),
            framework: s(&i.framework),
            precision: s(&i.precision),
            spec_decoding: given(&i.spec_decoding).unwrap_or("none").to_owned(),
            disagg: bool_of(&i.disagg, "--disagg", "DISAGG")?,
            tp: int_of(&i.tp, 1, "--tp", "TP")?,
            ep: int_of(&i.ep, 1, "--ep", "EP_SIZE")?,
            dp_attention: bool_of(&i.dp_attention, "--dp-attention", "DP_ATTENTION")?,
            offloading: given(&i.offloading).unwrap_or("none").to_owned(),
            multinode,
            pp: int_of(&i.pp, 1, "--pp", "PP_SIZE")?,
            dcp_size: int_of(&i.dcp_size, 1, "--dcp-size", "DCP_SIZE")?,
            pcp_size: int_of(&i.pcp_size, 1, "--pcp-size", "PCP_SIZE")?,
            recipe_fingerprint: opt(&i.recipe_fingerprint),
            kv_offload_backend: opt(&i.kv_offload_backend),
            allocated_cpu_dram_gb: opt(&i.allocated_cpu_dram_gb),
            router: opt(&i.router),
            kv_p2p_transfer: opt(&i.kv_p2p_transfer),
            prefill_hw: opt(&i.prefill_hw),
            decode_hw: opt(&i.decode_hw),
        })
    }

    /// GPUs the throughput is divided by: TP x PP x PCP on one node (decode context parallelism
    /// shares the TP GPUs), prefill plus decode GPUs on several.
    pub fn num_gpus(&self) -> u64 {
        match &self.multinode {
            None => self.tp * self.pp * self.pcp_size,
            Some(m) => m.prefill_num_workers * m.prefill_tp + m.decode_num_workers * m.decode_tp,
        }
    }
}
