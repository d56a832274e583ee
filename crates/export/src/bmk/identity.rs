//! Who benchmarked what: the identity fields of the report, from flags and InferenceX's environment
//! (the variables `infx/results/agentic/process_agentic_result.py` reads), with InferenceX's
//! defaults, and the checks of what the values may be (a fingerprint's digits, a component's JSON,
//! hardware names given in pairs). Whether the facts suffice for the strict row is the nested
//! layout's question ([`Identity::row_gaps`]).

use super::*;

/// Prefill and decode topology of a multinode (disaggregated) deployment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Multinode {
    /// Prefill workers.
    pub(crate) prefill_num_workers: u64,
    /// Tensor parallelism of each prefill worker.
    pub(crate) prefill_tp: u64,
    /// Expert parallelism of each prefill worker.
    pub(crate) prefill_ep: u64,
    /// Data-parallel attention on prefill.
    pub(crate) prefill_dp_attention: bool,
    /// Decode workers.
    pub(crate) decode_num_workers: u64,
    /// Tensor parallelism of each decode worker.
    pub(crate) decode_tp: u64,
    /// Expert parallelism of each decode worker.
    pub(crate) decode_ep: u64,
    /// Data-parallel attention on decode.
    pub(crate) decode_dp_attention: bool,
    /// Pipeline parallelism of each prefill worker (default 1).
    pub(crate) prefill_pp: u64,
    /// Decode context parallelism of each prefill worker (default 1).
    pub(crate) prefill_dcp_size: u64,
    /// Prefill context parallelism of each prefill worker (default 1).
    pub(crate) prefill_pcp_size: u64,
    /// Pipeline parallelism of each decode worker (default 1).
    pub(crate) decode_pp: u64,
    /// Decode context parallelism of each decode worker (default 1).
    pub(crate) decode_dcp_size: u64,
    /// Prefill context parallelism of each decode worker (default 1).
    pub(crate) decode_pcp_size: u64,
}

impl Multinode {
    /// Physical GPUs of the prefill role: workers x TP x PP x PCP.
    pub(crate) fn prefill_gpus(&self) -> u64 {
        self.prefill_num_workers * self.prefill_tp * self.prefill_pp * self.prefill_pcp_size
    }

    /// Physical GPUs of the decode role: workers x TP x PP x PCP.
    pub(crate) fn decode_gpus(&self) -> u64 {
        self.decode_num_workers * self.decode_tp * self.decode_pp * self.decode_pcp_size
    }
}

/// A named component of the deployment (`router`, `kv_offload_backend`): `{name, version}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Component {
    /// The component's name, e.g. lmcache.
    pub(crate) name: String,
    /// Its version; `None` when not given (then not written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<String>,
}

/// Who was benchmarked (the identity keys of docs/specs/inferencex-rows.md#flat-keys), from flags
/// or InferenceX's environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The hardware / runner name (`hw`); empty when not given.
    pub(crate) hw: String,
    /// The concurrency (`conc`); `None` when not given (the run's is used).
    pub(crate) conc: Option<u64>,
    /// The server's container image (`image`); empty when not given.
    pub(crate) image: String,
    /// The model name; empty when not given (the run's is used).
    pub(crate) model: String,
    /// `infmax_model_prefix`; empty when not given.
    pub(crate) model_prefix: String,
    /// The serving engine (`framework`), e.g. vllm or sglang; empty when not given.
    pub(crate) framework: String,
    /// The weight precision (`precision`), e.g. fp8; empty when not given.
    pub(crate) precision: String,
    /// Speculative decoding (`spec_decoding`), e.g. mtp; `none` by default.
    pub(crate) spec_decoding: String,
    /// Prefill and decode run on separate workers (`disagg`).
    pub(crate) disagg: bool,
    /// Tensor parallelism (default 1); the GPU count on a single node.
    pub(crate) tp: u64,
    /// Expert parallelism (default 1).
    pub(crate) ep: u64,
    /// Data-parallel attention (`dp_attention`).
    pub(crate) dp_attention: bool,
    /// KV-cache offloading (`kv_offloading`): none, dram, disk, remote, ...
    pub(crate) offloading: String,
    /// `Some` when `IS_MULTINODE` is true.
    pub(crate) multinode: Option<Multinode>,
    /// Pipeline parallelism (default 1).
    pub pp: u64,
    /// Decode context parallelism (default 1; shares the TP GPUs).
    pub dcp_size: u64,
    /// Prefill context parallelism (default 1).
    pub pcp_size: u64,
    /// 64 lower-case hex digits, or empty when the dispatched config has none.
    pub(crate) recipe_fingerprint: String,
    /// The KV offload backend (`kv_offload_backend`); `None` when offloading is off.
    pub(crate) kv_offload_backend: Option<Component>,
    /// CPU DRAM allocated to the KV cache, whole GB (default 0).
    pub(crate) allocated_cpu_dram_gb: u64,
    /// Always with a version.
    pub(crate) router: Option<Component>,
    /// The KV transfer between prefill and decode workers (`kv_p2p_transfer`, e.g. nixl); `None` when not given.
    pub(crate) kv_p2p_transfer: Option<String>,
    /// The prefill workers' hardware (`prefill_hw`); given together with `decode_hw` or not at all.
    pub(crate) prefill_hw: Option<String>,
    /// The decode workers' hardware (`decode_hw`); given together with `prefill_hw` or not at all.
    pub(crate) decode_hw: Option<String>,
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
            recipe_fingerprint: String::new(),
            kv_offload_backend: None,
            allocated_cpu_dram_gb: 0,
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
    /// `--hw` or `RUNNER_TYPE`: hardware / runner name (`hw`).
    pub hw: Option<String>,
    /// `--conc` or `CONC`: concurrency (`conc`); defaults to the run's.
    pub conc: Option<String>,
    /// `--image` or `IMAGE`: the server's container image (`image`).
    pub image: Option<String>,
    /// `--model` or `MODEL`: model name; defaults to the run's.
    pub model: Option<String>,
    /// `--model-prefix` or `MODEL_PREFIX`: `infmax_model_prefix`.
    pub model_prefix: Option<String>,
    /// `--framework` or `FRAMEWORK`: the serving engine (`framework`), e.g. vllm, sglang, trt, atom, dynamo-vllm.
    pub framework: Option<String>,
    /// `--precision` or `PRECISION`: weight precision (`precision`), e.g. fp8, fp4, bf16.
    pub precision: Option<String>,
    /// `--spec-decoding` or `SPEC_DECODING`: speculative decoding (`spec_decoding`), e.g. mtp, eagle (default "none").
    pub spec_decoding: Option<String>,
    /// `--disagg` or `DISAGG`: prefill and decode on separate workers (`disagg`): true or false (default false).
    pub disagg: Option<String>,
    /// `--is-multinode` or `IS_MULTINODE`: the server spans several nodes (`is_multinode`): true or false (default false).
    pub is_multinode: Option<String>,
    /// `--tp` or `TP`: tensor parallelism; the GPU count on a single node (default 1).
    pub tp: Option<String>,
    /// `--ep` or `EP_SIZE`: expert parallelism (`ep`, default 1).
    pub ep: Option<String>,
    /// `--dp-attention` or `DP_ATTENTION`: data-parallel attention (`dp_attention`): true or false (default false).
    pub dp_attention: Option<String>,
    /// `--kv-offloading` or `KV_OFFLOADING`: kV-cache offloading (`kv_offloading`): none, dram, disk, remote, ... (default none).
    pub kv_offloading: Option<String>,
    /// `--prefill-num-workers` or `PREFILL_NUM_WORKERS`: disaggregated: prefill workers (`prefill_num_workers`).
    pub prefill_num_workers: Option<String>,
    /// `--prefill-tp` or `PREFILL_TP`: disaggregated: tensor parallelism of each prefill worker (`prefill_tp`).
    pub prefill_tp: Option<String>,
    /// `--prefill-ep` or `PREFILL_EP`: disaggregated: expert parallelism of each prefill worker (`prefill_ep`).
    pub prefill_ep: Option<String>,
    /// `--prefill-dp-attention` or `PREFILL_DP_ATTN`: disaggregated: data-parallel attention on prefill (`prefill_dp_attention`).
    pub prefill_dp_attention: Option<String>,
    /// `--decode-num-workers` or `DECODE_NUM_WORKERS`: disaggregated: decode workers (`decode_num_workers`).
    pub decode_num_workers: Option<String>,
    /// `--decode-tp` or `DECODE_TP`: disaggregated: tensor parallelism of each decode worker (`decode_tp`).
    pub decode_tp: Option<String>,
    /// `--decode-ep` or `DECODE_EP`: disaggregated: expert parallelism of each decode worker (`decode_ep`).
    pub decode_ep: Option<String>,
    /// `--decode-dp-attention` or `DECODE_DP_ATTN`: disaggregated: data-parallel attention on decode (`decode_dp_attention`).
    pub decode_dp_attention: Option<String>,
    /// `--prefill-pp` or `PREFILL_PP_SIZE`: disaggregated: pipeline parallelism of each prefill worker (`prefill_pp`, default 1).
    pub prefill_pp: Option<String>,
    /// `--prefill-dcp-size` or `PREFILL_DCP_SIZE`: disaggregated: decode context parallelism of each prefill worker (`prefill_dcp_size`, default 1).
    pub prefill_dcp_size: Option<String>,
    /// `--prefill-pcp-size` or `PREFILL_PCP_SIZE`: disaggregated: prefill context parallelism of each prefill worker (`prefill_pcp_size`, default 1).
    pub prefill_pcp_size: Option<String>,
    /// `--decode-pp` or `DECODE_PP_SIZE`: disaggregated: pipeline parallelism of each decode worker (`decode_pp`, default 1).
    pub decode_pp: Option<String>,
    /// `--decode-dcp-size` or `DECODE_DCP_SIZE`: disaggregated: decode context parallelism of each decode worker (`decode_dcp_size`, default 1).
    pub decode_dcp_size: Option<String>,
    /// `--decode-pcp-size` or `DECODE_PCP_SIZE`: disaggregated: prefill context parallelism of each decode worker (`decode_pcp_size`, default 1).
    pub decode_pcp_size: Option<String>,
    /// `--pp` or `PP_SIZE`: pipeline parallelism (default 1); the per-GPU divisor is TP x PP x PCP on one node.
    pub pp: Option<String>,
    /// `--dcp-size` or `DCP_SIZE`: decode context parallelism (default 1; runs on the TP GPUs).
    pub dcp_size: Option<String>,
    /// `--pcp-size` or `PCP_SIZE`: prefill context parallelism (default 1).
    pub pcp_size: Option<String>,
    /// `--recipe-fingerprint` or `RECIPE_FINGERPRINT`: nested layout: `recipe_fingerprint`, 64 lower-case hex digits (default empty: the dispatched config has none).
    pub recipe_fingerprint: Option<String>,
    /// `--kv-offload-backend` or `KV_OFFLOAD_BACKEND`: nested layout: the KV offload backend's name (`kv_offload_backend.name`, e.g. lmcache, native, mooncake); required when KV offloading is on, refused when it is none.
    pub kv_offload_backend: Option<String>,
    /// `--kv-offload-backend-metadata` or `KV_OFFLOAD_BACKEND_METADATA`: nested layout: the KV offload backend as `{"name": ..., "version": ...}` (version optional); its name must match --kv-offload-backend.
    pub kv_offload_backend_metadata: Option<String>,
    /// `--allocated-cpu-dram-gb` or `TOTAL_CPU_DRAM_GB`: nested layout: CPU DRAM allocated to the KV cache (`allocated_cpu_dram_gb`, whole GB, default 0).
    pub allocated_cpu_dram_gb: Option<String>,
    /// `--router` or `ROUTER_METADATA`: nested layout: the router in front of the engines (`router`), as `{"name": ..., "version": ...}` (both required).
    pub router: Option<String>,
    /// `--kv-p2p-transfer` or `KV_P2P_TRANSFER`: nested layout: `kv_p2p_transfer` (e.g. nixl).
    pub kv_p2p_transfer: Option<String>,
    /// `--prefill-hw` or `PREFILL_HARDWARE`: nested layout, multinode: `prefill_hw` (given together with --decode-hw).
    pub prefill_hw: Option<String>,
    /// `--decode-hw` or `DECODE_HARDWARE`: nested layout, multinode: `decode_hw` (given together with --prefill-hw).
    pub decode_hw: Option<String>,
}

pub(super) fn given(setting: &Option<String>) -> Option<&str> {
    setting.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

pub(super) fn int_of(
    setting: &Option<String>,
    default: u64,
    flag: &'static str,
    env: &'static str,
) -> Result<u64, ReportError> {
    match given(setting) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| ReportError::Identity {
            flag,
            env,
            message: format!("{s:?} is not a non-negative integer"),
        }),
    }
}

pub(super) fn bool_of(
    setting: &Option<String>,
    flag: &'static str,
    env: &'static str,
) -> Result<bool, ReportError> {
    match given(setting).map(str::to_ascii_lowercase).as_deref() {
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

/// `--router` / `--kv-offload-backend-metadata`: `{"name": ..., "version": ...}` with non-empty
/// strings; `version` may be left out only where `version_optional`. Empty or `null` means none.
fn component_of(
    setting: &Option<String>,
    version_optional: bool,
    flag: &'static str,
    env: &'static str,
) -> Result<Option<Component>, ReportError> {
    let Some(text) = given(setting).filter(|t| *t != "null") else {
        return Ok(None);
    };
    let err = |message: String| ReportError::Identity { flag, env, message };
    let shape = if version_optional {
        r#"{"name": "NAME"} or {"name": "NAME", "version": "VERSION"}"#
    } else {
        r#"{"name": "NAME", "version": "VERSION"}"#
    };
    let obj: serde_json::Map<String, Value> = serde_json::from_str(text).map_err(|e| {
        err(format!(
            "{text:?} is not a JSON object ({e}); write {shape}"
        ))
    })?;
    let field = |k: &str| -> Result<Option<String>, ReportError> {
        match obj.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
            Some(other) => Err(err(format!(
                "{k} must be a non-empty string, got {other}; write {shape}"
            ))),
        }
    };
    if let Some(extra) = obj.keys().find(|k| *k != "name" && *k != "version") {
        return Err(err(format!("unknown key {extra:?}; write {shape}")));
    }
    let (name, version) = (field("name")?, field("version")?);
    match (name, version) {
        (Some(name), version) if version.is_some() || version_optional => {
            Ok(Some(Component { name, version }))
        }
        _ => Err(err(format!(
            "{text:?} lacks a name or version; write {shape}"
        ))),
    }
}

/// The KV offload backend: `--kv-offload-backend-metadata` when given (its name must match
/// `--kv-offload-backend`), else `{name}` of `--kv-offload-backend`.
fn offload_backend_of(input: &IdentityInput) -> Result<Option<Component>, ReportError> {
    let meta = component_of(
        &input.kv_offload_backend_metadata,
        true,
        "--kv-offload-backend-metadata",
        "KV_OFFLOAD_BACKEND_METADATA",
    )?;
    let name = given(&input.kv_offload_backend).filter(|n| *n != "none");
    match (meta, name) {
        (Some(m), Some(n)) if m.name != n => Err(ReportError::Identity {
            flag: "--kv-offload-backend-metadata",
            env: "KV_OFFLOAD_BACKEND_METADATA",
            message: format!(
                "its name {:?} differs from --kv-offload-backend (KV_OFFLOAD_BACKEND) {n:?}; give the same backend",
                m.name
            ),
        }),
        (Some(m), _) => Ok(Some(m)),
        (None, Some(n)) => Ok(Some(Component {
            name: n.to_owned(),
            version: None,
        })),
        (None, None) => Ok(None),
    }
}

/// 64 lower-case hex digits, or empty.
fn fingerprint_of(setting: &Option<String>) -> Result<String, ReportError> {
    let fingerprint = given(setting).unwrap_or_default();
    if fingerprint.is_empty()
        || (fingerprint.len() == 64
            && fingerprint
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    {
        Ok(fingerprint.to_owned())
    } else {
        Err(ReportError::Identity {
            flag: "--recipe-fingerprint",
            env: "RECIPE_FINGERPRINT",
            message: format!("{fingerprint:?} is not 64 lower-case hex digits (nor empty)"),
        })
    }
}

fn multinode_of(input: &IdentityInput) -> Result<Multinode, ReportError> {
    let mut multinode = Multinode {
        prefill_num_workers: int_of(
            &input.prefill_num_workers,
            0,
            "--prefill-num-workers",
            "PREFILL_NUM_WORKERS",
        )?,
        prefill_tp: int_of(&input.prefill_tp, 0, "--prefill-tp", "PREFILL_TP")?,
        prefill_ep: int_of(&input.prefill_ep, 1, "--prefill-ep", "PREFILL_EP")?,
        prefill_dp_attention: bool_of(
            &input.prefill_dp_attention,
            "--prefill-dp-attention",
            "PREFILL_DP_ATTN",
        )?,
        decode_num_workers: int_of(
            &input.decode_num_workers,
            0,
            "--decode-num-workers",
            "DECODE_NUM_WORKERS",
        )?,
        decode_tp: int_of(&input.decode_tp, 0, "--decode-tp", "DECODE_TP")?,
        decode_ep: int_of(&input.decode_ep, 1, "--decode-ep", "DECODE_EP")?,
        decode_dp_attention: bool_of(
            &input.decode_dp_attention,
            "--decode-dp-attention",
            "DECODE_DP_ATTN",
        )?,
        prefill_pp: int_of(&input.prefill_pp, 1, "--prefill-pp", "PREFILL_PP_SIZE")?,
        prefill_dcp_size: int_of(
            &input.prefill_dcp_size,
            1,
            "--prefill-dcp-size",
            "PREFILL_DCP_SIZE",
        )?,
        prefill_pcp_size: int_of(
            &input.prefill_pcp_size,
            1,
            "--prefill-pcp-size",
            "PREFILL_PCP_SIZE",
        )?,
        decode_pp: int_of(&input.decode_pp, 1, "--decode-pp", "DECODE_PP_SIZE")?,
        decode_dcp_size: int_of(
            &input.decode_dcp_size,
            1,
            "--decode-dcp-size",
            "DECODE_DCP_SIZE",
        )?,
        decode_pcp_size: int_of(
            &input.decode_pcp_size,
            1,
            "--decode-pcp-size",
            "DECODE_PCP_SIZE",
        )?,
    };
    // An aggregated deployment (no decode GPUs: prefill and decode share a worker) has no decode
    // parallelism, so TP, EP and the GPU count are the prefill workers' alone (as InferenceX does).
    if multinode.decode_gpus() == 0 {
        (multinode.decode_tp, multinode.decode_ep) = (0, 0);
        (
            multinode.decode_pp,
            multinode.decode_dcp_size,
            multinode.decode_pcp_size,
        ) = (1, 1, 1);
    }
    Ok(multinode)
}

impl Identity {
    /// Resolves raw values with InferenceX's defaults (TP 1, EP 1, PP/DCP/PCP 1, spec decoding
    /// "none", offloading "none", no CPU DRAM, booleans false).
    pub fn resolve(input: &IdentityInput) -> Result<Identity, ReportError> {
        let owned = |v: &Option<String>| given(v).unwrap_or_default().to_owned();
        let opt = |v: &Option<String>| given(v).map(str::to_owned);
        let is_multinode = bool_of(&input.is_multinode, "--is-multinode", "IS_MULTINODE")?;
        let multinode = if is_multinode {
            Some(multinode_of(input)?)
        } else {
            None
        };
        let (prefill_hw, decode_hw) = (opt(&input.prefill_hw), opt(&input.decode_hw));
        if prefill_hw.is_some() != decode_hw.is_some() {
            return Err(ReportError::Identity {
                flag: "--prefill-hw/--decode-hw",
                env: "PREFILL_HARDWARE/DECODE_HARDWARE",
                message: "give both hardware names or neither".into(),
            });
        }
        Ok(Identity {
            hw: owned(&input.hw),
            conc: match given(&input.conc) {
                None => None,
                Some(_) => Some(int_of(&input.conc, 0, "--conc", "CONC")?),
            },
            image: owned(&input.image),
            model: owned(&input.model),
            model_prefix: owned(&input.model_prefix),
            framework: owned(&input.framework),
            precision: owned(&input.precision),
            spec_decoding: given(&input.spec_decoding).unwrap_or("none").to_owned(),
            disagg: bool_of(&input.disagg, "--disagg", "DISAGG")?,
            tp: int_of(&input.tp, 1, "--tp", "TP")?,
            ep: int_of(&input.ep, 1, "--ep", "EP_SIZE")?,
            dp_attention: bool_of(&input.dp_attention, "--dp-attention", "DP_ATTENTION")?,
            offloading: given(&input.kv_offloading).unwrap_or("none").to_owned(),
            multinode,
            pp: int_of(&input.pp, 1, "--pp", "PP_SIZE")?,
            dcp_size: int_of(&input.dcp_size, 1, "--dcp-size", "DCP_SIZE")?,
            pcp_size: int_of(&input.pcp_size, 1, "--pcp-size", "PCP_SIZE")?,
            recipe_fingerprint: fingerprint_of(&input.recipe_fingerprint)?,
            kv_offload_backend: offload_backend_of(input)?,
            allocated_cpu_dram_gb: int_of(
                &input.allocated_cpu_dram_gb,
                0,
                "--allocated-cpu-dram-gb",
                "TOTAL_CPU_DRAM_GB",
            )?,
            router: component_of(&input.router, false, "--router", "ROUTER_METADATA")?,
            kv_p2p_transfer: opt(&input.kv_p2p_transfer),
            prefill_hw,
            decode_hw,
        })
    }

    /// Physical GPUs, the throughput's per-GPU divisor: TP x PP x PCP on one node (decode context
    /// parallelism and EP share the TP GPUs), prefill plus decode GPUs on several.
    pub(crate) fn num_gpus(&self) -> u64 {
        match &self.multinode {
            None => self.tp * self.pp * self.pcp_size,
            Some(m) => m.prefill_gpus() + m.decode_gpus(),
        }
    }

    /// What keeps the strict InferenceX row from being written, one line per missing or
    /// out-of-range fact naming the flag (and variable) that gives it; empty when nothing does.
    /// `conc` and `model` are the resolved ones (the run's when not given).
    pub(crate) fn row_gaps(&self, conc: Option<u64>, model: &str) -> Vec<String> {
        let mut gaps = Vec::new();
        let mut need = |ok: bool, what: &str, fix: &str| {
            if !ok {
                gaps.push(format!("{what}: {fix}"));
            }
        };
        for (v, key, fix) in [
            (&self.hw, "hw", "pass --hw NAME (or set RUNNER_TYPE)"),
            (&self.image, "image", "pass --image IMAGE (or set IMAGE)"),
            (
                &self.model_prefix,
                "infmax_model_prefix",
                "pass --model-prefix PREFIX (or set MODEL_PREFIX)",
            ),
            (
                &self.framework,
                "framework",
                "pass --framework NAME (or set FRAMEWORK)",
            ),
            (
                &self.precision,
                "precision",
                "pass --precision NAME (or set PRECISION)",
            ),
        ] {
            need(!v.is_empty(), &format!("{key} is empty"), fix);
        }
        need(
            !model.is_empty(),
            "model is empty and run_summary.json names none",
            "pass --model MODEL (or set MODEL)",
        );
        need(
            conc.is_some_and(|c| c > 0),
            "conc is not a positive integer and run_summary.json has no concurrency",
            "pass --conc N (or set CONC)",
        );
        need(self.num_gpus() > 0, "num_gpus is 0", "give a positive GPU count (--tp/--pp/--pcp-size, or the prefill and decode workers and TP on multinode)");
        need(self.ep > 0, "ep is 0", "pass --ep N >= 1 (or set EP_SIZE)");
        match &self.multinode {
            None => {
                need(self.tp > 0, "tp is 0", "pass --tp N >= 1 (or set TP)");
                need(
                    self.dcp_size > 0,
                    "dcp_size is 0",
                    "pass --dcp-size N >= 1 (or set DCP_SIZE)",
                );
            }
            Some(m) => {
                need(
                    m.prefill_tp > 0,
                    "prefill_tp is 0",
                    "pass --prefill-tp N >= 1 (or set PREFILL_TP)",
                );
                need(
                    m.prefill_ep > 0,
                    "prefill_ep is 0",
                    "pass --prefill-ep N >= 1 (or set PREFILL_EP)",
                );
                for (v, f) in [
                    (m.prefill_pp, "--prefill-pp"),
                    (m.prefill_dcp_size, "--prefill-dcp-size"),
                    (m.prefill_pcp_size, "--prefill-pcp-size"),
                    (m.decode_pp, "--decode-pp"),
                    (m.decode_dcp_size, "--decode-dcp-size"),
                    (m.decode_pcp_size, "--decode-pcp-size"),
                ] {
                    need(
                        v > 0,
                        &format!("{} is 0", &f[2..].replace('-', "_")),
                        &format!("pass {f} N >= 1"),
                    );
                }
            }
        }
        if self.multinode.is_none() {
            need(
                self.pp > 0 && self.pcp_size > 0,
                "pp or pcp_size is 0",
                "pass --pp and --pcp-size >= 1 (or set PP_SIZE, PCP_SIZE)",
            );
        }
        let offloads = self.offloading != "none";
        need(
            offloads || self.kv_offload_backend.is_none(),
            "kv_offload_backend is given while kv_offloading is none",
            "drop --kv-offload-backend (KV_OFFLOAD_BACKEND), or pass --kv-offloading MODE",
        );
        need(
            !offloads || self.kv_offload_backend.is_some(),
            &format!(
                "kv_offloading is {:?} but no kv_offload_backend is given",
                self.offloading
            ),
            "pass --kv-offload-backend NAME (or set KV_OFFLOAD_BACKEND)",
        );
        gaps
    }
}
