//! The content-addressed dataset cache: the binary entry format, its builder, its validation, and the
//! store protocol that writes entries atomically under a lock.
//!
//! An entry is one file `<dir>/<key>.agxd`, where `<key>` is the first 32 hex digits of
//! sha256(format version, source digest, options that change content). It is written to a temp file in
//! the same directory, fsynced and renamed into place, so readers see a whole entry or none. Builders of
//! the same key serialize on `<dir>/<key>.lock`; the loser of the race re-checks and maps the winner's
//! entry instead of building again. An entry that fails validation (foreign, truncated, wrong version or
//! key, bad checksum, out-of-bounds records) is rebuilt.
//!
//! Layout (little-endian, sections 8-byte aligned): a 128-byte header; trace records (40 bytes);
//! turn records (80 bytes); the hash-id pool (u32); the string table. Hash ids are stored as deltas: a
//! turn keeps the length of its longest common prefix with the previous turn of its trace and only the
//! ids after it, so the long shared prefixes of consecutive turns are stored once. The last string of
//! the table is the import's report (`ImportReport` as JSON: the [`WarningReport`] fields, plus the
//! counts of a `--max-context-length` selection), so a warm open reports the warnings and the selection
//! of the import that built the entry. An entry of session trees ([`super::tree::corpus`]) keeps one
//! trace record per stream and the trees' topology in that report.
//!
//! A trace record's last word is its flags: bit 0 (`TRACE_GLOBAL_HASH_IDS`) says the corpus's hash ids
//! are global (one id names one block of text in every trace, as in Mooncake traces), so prompt text is
//! keyed by (seed, hash id) rather than (seed, trace, hash id). A weka trace's flags are 0, as the word
//! was before it had a meaning, so weka entries are unchanged. A turn record's last word is its flags
//! too: bit 0 (`TURN_NO_OUTPUT_LIMIT`) says the request records no output length (a Mooncake row
//! without `output_length`), so its output is 0 and it is sent without a token limit. The format a
//! corpus was read as (when not weka) is in the import report (`ImportReport::corpus`).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::DatasetError;
use super::format::FormatSpec;
use super::mmap::{as_u32s, Mapped};
use super::select::{Selection, SelectionReport};
use super::tree::TreeTopology;
use super::warnings::WarningReport;
use super::weka::{ParsedTrace, RequestKind};

pub(crate) const MAGIC: [u8; 8] = *b"AGXDSET\n";
/// Bump on any change of the layout or of what the builder stores.
pub(crate) const FORMAT_VERSION: u32 = 5;
pub(crate) const HEADER_LEN: usize = 128;
pub(crate) const TRACE_REC: usize = 40;
pub(crate) const TURN_REC: usize = 80;
/// File name extension of entries.
pub(crate) const ENTRY_EXT: &str = "agxd";
/// Flag of a trace record: the corpus's hash ids are global (module docs).
pub(crate) const TRACE_GLOBAL_HASH_IDS: u32 = 1;
/// Flag of a turn record: the request records no output length and is sent without a token limit
/// (module docs).
pub(crate) const TURN_NO_OUTPUT_LIMIT: u32 = 1;

/// A cache key: sha256 over everything that determines an entry's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Derives the key of `source_digest` (sha256 of the source bytes) with the given trace cap.
    pub fn derive(source_digest: &[u8; 32], limit: Option<usize>) -> Self {
        Self::derive_selection(
            source_digest,
            &Selection {
                num_dataset_entries: limit,
                ..Selection::default()
            },
        )
    }

    /// Derives the key of `source_digest` with a selection. Without `--max-context-length` the key is
    /// [`Self::derive`]'s of the cap alone (the output cap changes nothing then), so entries built before
    /// the context filter existed stay valid.
    pub(crate) fn derive_selection(source_digest: &[u8; 32], sel: &Selection) -> Self {
        let limit = sel.num_dataset_entries;
        let mut hasher = Sha256::new();
        hasher.update(b"agentx-dataset-cache\0");
        hasher.update(FORMAT_VERSION.to_le_bytes());
        hasher.update(b"\0source\0");
        hasher.update(source_digest);
        hasher.update(b"\0num_dataset_entries\0");
        match limit {
            Some(n) => hasher.update((n as u64).to_le_bytes()),
            None => hasher.update(b"all"),
        }
        if let Some(max_context) = sel.max_context_length {
            hasher.update(b"\0max_context_length\0");
            hasher.update(max_context.to_le_bytes());
            hasher.update(b"\0max_osl\0");
            match sel.max_osl {
                Some(o) => hasher.update(u64::from(o).to_le_bytes()),
                None => hasher.update(b"none"),
            }
        }
        CacheKey(hasher.finalize().into())
    }

    /// The 32 hex digits naming the entry.
    pub(crate) fn short_hex(&self) -> String {
        hex::encode(&self.0[..16])
    }
}

/// A fast 64-bit checksum (four interleaved multiply-xor lanes over u64 words): detects torn or foreign
/// bytes cheaply enough to run on every open. Not a cryptographic hash; the key is.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    const K: [u64; 4] = [
        0x9E37_79B9_7F4A_7C15,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0x27D4_EB2F_1656_67C5,
    ];
    let mut lanes = K;
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let word = u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            *lane = (*lane ^ word).wrapping_mul(K[i] | 1).rotate_left(29);
        }
    }
    let mut hash = (bytes.len() as u64).wrapping_mul(K[0]);
    for (i, lane) in lanes.iter().enumerate() {
        hash = (hash ^ lane)
            .wrapping_mul(K[(i + 1) % 4] | 1)
            .rotate_left(31);
    }
    for &b in chunks.remainder() {
        hash = (hash ^ u64::from(b)).wrapping_mul(K[2] | 1);
    }
    hash ^ (hash >> 33)
}

#[inline]
pub(crate) fn rd_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}
#[inline]
pub(crate) fn rd_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}
#[inline]
pub(crate) fn rd_f64(bytes: &[u8], offset: usize) -> f64 {
    f64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Interns strings into the table: trace ids, models, stop reasons, type lists.
#[derive(Default)]
struct Interner {
    index: std::collections::HashMap<String, u32>,
    spans: Vec<(u32, u32)>,
    bytes: Vec<u8>,
}

impl Interner {
    fn intern(&mut self, text: &str) -> Result<u32, String> {
        if let Some(&slot) = self.index.get(text) {
            return Ok(slot);
        }
        let off = u32::try_from(self.bytes.len()).map_err(|_| "string table exceeds 4 GiB")?;
        let slot = u32::try_from(self.spans.len()).map_err(|_| "too many strings")?;
        self.bytes.extend_from_slice(text.as_bytes());
        self.spans.push((off, text.len() as u32));
        self.index.insert(text.to_owned(), slot);
        Ok(slot)
    }
}

/// Accumulates traces and writes an entry.
pub(crate) struct Builder {
    traces: Vec<u8>,
    turns: Vec<u8>,
    pool: Vec<u32>,
    strings: Interner,
    n_traces: u32,
    n_turns: u32,
    subagents: u64,
    warnings: WarningReport,
    selection: Option<SelectionReport>,
    trees: Option<TreeTopology>,
    corpus: Option<FormatSpec>,
    global_hash_ids: bool,
}

/// The last string of an entry: the warning report's fields, plus the selection counts when the
/// import selected traces by context length. Readers that know only [`WarningReport`] ignore the
/// extra field.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ImportReport {
    #[serde(flatten)]
    pub warnings: WarningReport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<SelectionReport>,
    /// The session trees of an entry of [`super::tree::corpus::TreeCorpus`] (one trajectory per
    /// stream); `None` in a dataset entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trees: Option<TreeTopology>,
    /// The format a corpus other than weka was read as (with its options); `None` for weka, so a weka
    /// entry's report is what it was before other formats existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<FormatSpec>,
}

impl Default for Builder {
    fn default() -> Self {
        let mut strings = Interner::default();
        strings.intern("").expect("empty string");
        Builder {
            traces: Vec::new(),
            turns: Vec::new(),
            pool: Vec::new(),
            strings,
            n_traces: 0,
            n_turns: 0,
            subagents: 0,
            warnings: WarningReport::default(),
            selection: None,
            trees: None,
            corpus: None,
            global_hash_ids: false,
        }
    }
}

fn opt(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NAN)
}

impl Builder {
    /// Adds one validated trace.
    pub(crate) fn add(&mut self, trace: &ParsedTrace) -> Result<(), String> {
        let id_index = self.strings.intern(&trace.id)?;
        let models = self.strings.intern(&trace.models.join("\n"))?;
        let first_turn = self.n_turns;
        let num_requests =
            u32::try_from(trace.requests.len()).map_err(|_| "too many requests in one trace")?;
        self.n_turns = self
            .n_turns
            .checked_add(num_requests)
            .ok_or("more than 2^32 requests in the corpus")?;
        let mut prev: &[u32] = &[];
        for r in &trace.requests {
            let lcp = prev
                .iter()
                .zip(&r.hash_ids)
                .take_while(|(a, buf)| a == buf)
                .count();
            let suffix_off = self.pool.len() as u64;
            self.pool.extend_from_slice(&r.hash_ids[lcp..]);
            let n_ids =
                u32::try_from(r.hash_ids.len()).map_err(|_| "too many hash ids in one request")?;
            let model = self.strings.intern(&r.model)?;
            let stop = self.strings.intern(&r.stop)?;
            let input_types = self.strings.intern(&r.input_types.join(","))?;
            let output_types = self.strings.intern(&r.output_types.join(","))?;
            let buf = &mut self.turns;
            buf.extend_from_slice(&r.t.to_le_bytes());
            buf.extend_from_slice(&opt(r.think_time).to_le_bytes());
            buf.extend_from_slice(&opt(r.api_time).to_le_bytes());
            buf.extend_from_slice(&opt(r.ttft).to_le_bytes());
            buf.extend_from_slice(&r.input.to_le_bytes());
            buf.extend_from_slice(&r.output.to_le_bytes());
            buf.extend_from_slice(&(lcp as u32).to_le_bytes());
            buf.extend_from_slice(&n_ids.to_le_bytes());
            buf.extend_from_slice(&suffix_off.to_le_bytes());
            buf.extend_from_slice(&model.to_le_bytes());
            buf.extend_from_slice(&stop.to_le_bytes());
            buf.extend_from_slice(&input_types.to_le_bytes());
            buf.extend_from_slice(&output_types.to_le_bytes());
            let kind: u32 = match r.kind {
                RequestKind::Normal => 0,
                RequestKind::Streaming => 1,
            };
            buf.extend_from_slice(&kind.to_le_bytes());
            let flags = if r.no_output_limit {
                TURN_NO_OUTPUT_LIMIT
            } else {
                0
            };
            buf.extend_from_slice(&flags.to_le_bytes());
            prev = &r.hash_ids;
        }
        let buf = &mut self.traces;
        for v in [
            id_index,
            models,
            first_turn,
            num_requests,
            trace.block_size,
            trace.tool_tokens,
            trace.system_tokens,
            trace.subagents,
            u32::try_from(trace.location.line).unwrap_or(u32::MAX),
            if self.global_hash_ids {
                TRACE_GLOBAL_HASH_IDS
            } else {
                0
            },
        ] {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        self.n_traces = self
            .n_traces
            .checked_add(1)
            .ok_or("more than 2^32 traces")?;
        self.subagents += u64::from(trace.subagents);
        for w in &trace.warnings {
            self.warnings.add(w);
        }
        Ok(())
    }

    /// The warnings of the traces added so far.
    pub(crate) fn warnings(&self) -> &WarningReport {
        &self.warnings
    }

    /// Records the counts of the selection that chose the added traces (stored with the warnings).
    pub(crate) fn set_selection(&mut self, report: SelectionReport) {
        self.selection = Some(report);
    }

    /// Records the session trees whose streams the added traces are (stored with the warnings).
    pub(crate) fn set_trees(&mut self, trees: TreeTopology) {
        self.trees = Some(trees);
    }

    /// Records the format a corpus other than weka was read as (stored with the warnings); with global
    /// hash ids, every trace added after this call is flagged [`TRACE_GLOBAL_HASH_IDS`].
    pub(crate) fn set_corpus(&mut self, spec: FormatSpec) {
        self.global_hash_ids = spec.format.global_hash_ids();
        self.corpus = Some(spec);
    }

    /// Flags the traces added after this call as having global hash ids (a tree entry of such a corpus).
    pub(crate) fn set_global_hash_ids(&mut self, global: bool) {
        self.global_hash_ids = global;
    }

    /// Number of traces added.
    pub(crate) fn traces(&self) -> u32 {
        self.n_traces
    }

    /// Serializes the entry.
    pub(crate) fn finish(mut self, key: &CacheKey) -> Vec<u8> {
        // The report goes last, as its own string (not interned: a trace string may equal it).
        let report = serde_json::to_string(&ImportReport {
            warnings: std::mem::take(&mut self.warnings),
            selection: self.selection.take(),
            trees: self.trees.take(),
            corpus: self.corpus.take(),
        })
        .expect("a report serializes");
        let off = self.strings.bytes.len() as u32;
        self.strings.bytes.extend_from_slice(report.as_bytes());
        self.strings.spans.push((off, report.len() as u32));
        let align8 = |n: usize| n.div_ceil(8) * 8;
        let traces_off = HEADER_LEN;
        let turns_off = align8(traces_off + self.traces.len());
        let pool_off = align8(turns_off + self.turns.len());
        let strings_off = align8(pool_off + self.pool.len() * 4);
        let table = 8 + self.strings.spans.len() * 8;
        let total = strings_off + table + self.strings.bytes.len();
        let mut out = vec![0u8; HEADER_LEN];
        out.reserve(total - HEADER_LEN);
        out.extend_from_slice(&self.traces);
        out.resize(turns_off, 0);
        out.extend_from_slice(&self.turns);
        out.resize(pool_off, 0);
        for id in &self.pool {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.resize(strings_off, 0);
        out.extend_from_slice(&(self.strings.spans.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for (o, l) in &self.strings.spans {
            out.extend_from_slice(&o.to_le_bytes());
            out.extend_from_slice(&l.to_le_bytes());
        }
        out.extend_from_slice(&self.strings.bytes);
        debug_assert_eq!(out.len(), total);
        let body = checksum(&out[HEADER_LEN..]);
        let header = &mut out[..HEADER_LEN];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        header[16..24].copy_from_slice(&(total as u64).to_le_bytes());
        header[24..56].copy_from_slice(&key.0);
        header[56..60].copy_from_slice(&self.n_traces.to_le_bytes());
        header[60..64].copy_from_slice(&self.n_turns.to_le_bytes());
        header[64..72].copy_from_slice(&(self.pool.len() as u64).to_le_bytes());
        header[72..80].copy_from_slice(&self.subagents.to_le_bytes());
        header[80..88].copy_from_slice(&(traces_off as u64).to_le_bytes());
        header[88..96].copy_from_slice(&(turns_off as u64).to_le_bytes());
        header[96..104].copy_from_slice(&(pool_off as u64).to_le_bytes());
        header[104..112].copy_from_slice(&(strings_off as u64).to_le_bytes());
        header[112..120].copy_from_slice(&body.to_le_bytes());
        let header_sum = checksum(&header[..120]);
        header[120..128].copy_from_slice(&header_sum.to_le_bytes());
        out
    }
}

/// The validated section offsets of an entry. Every record's references were bounds-checked when the
/// layout was parsed, so views index without further checks and cannot panic on a valid layout.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub key: CacheKey,
    pub(crate) n_traces: usize,
    pub(crate) n_turns: usize,
    pub pool_len: usize,
    pub subagents: u64,
    pub(crate) traces_off: usize,
    pub(crate) turns_off: usize,
    pub(crate) pool_off: usize,
    pub(crate) strings_off: usize,
    pub(crate) n_strings: usize,
    pub(crate) file_len: usize,
}

impl Layout {
    /// Validates an entry: header, checksums, key, section bounds and every record's references.
    pub(crate) fn parse(bytes: &[u8], expected: Option<&CacheKey>) -> Result<Layout, String> {
        if bytes.len() < HEADER_LEN {
            return Err(format!(
                "{} bytes is shorter than the {HEADER_LEN}-byte header (truncated)",
                bytes.len()
            ));
        }
        if bytes[0..8] != MAGIC {
            return Err("not an agentx dataset cache entry (bad magic)".into());
        }
        let version = rd_u32(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            ));
        }
        if checksum(&bytes[..120]) != rd_u64(bytes, 120) {
            return Err("header checksum mismatch".into());
        }
        let file_len = rd_u64(bytes, 16);
        if rd_u32(bytes, 12) as usize != HEADER_LEN || file_len != bytes.len() as u64 {
            return Err(format!(
                "length {} but the header says {file_len} (truncated or foreign)",
                bytes.len()
            ));
        }
        let key = CacheKey(bytes[24..56].try_into().expect("32 bytes"));
        if expected.is_some_and(|k| *k != key) {
            return Err("entry holds a different key".into());
        }
        if checksum(&bytes[HEADER_LEN..]) != rd_u64(bytes, 112) {
            return Err("body checksum mismatch (corrupt)".into());
        }
        let n_traces = rd_u32(bytes, 56) as usize;
        let n_turns = rd_u32(bytes, 60) as usize;
        let pool_len = usize::try_from(rd_u64(bytes, 64)).map_err(|_| "pool too large")?;
        let subagents = rd_u64(bytes, 72);
        let off = |offset: usize| {
            usize::try_from(rd_u64(bytes, offset)).map_err(|_| "offset too large".to_string())
        };
        let (traces_off, turns_off, pool_off, strings_off) =
            (off(80)?, off(88)?, off(96)?, off(104)?);
        let fits = |start: usize, len: Option<usize>, end: usize| {
            len.and_then(|str_len| start.checked_add(str_len))
                .is_some_and(|e| e <= end)
        };
        if traces_off != HEADER_LEN
            || !fits(traces_off, n_traces.checked_mul(TRACE_REC), turns_off)
            || !fits(turns_off, n_turns.checked_mul(TURN_REC), pool_off)
            || !fits(pool_off, pool_len.checked_mul(4), strings_off)
            || !fits(strings_off, Some(8), bytes.len())
            || pool_off % 4 != 0
        {
            return Err("section bounds out of range".into());
        }
        let n_strings = rd_u32(bytes, strings_off) as usize;
        let table_end = strings_off
            .checked_add(8)
            .and_then(|x| n_strings.checked_mul(8).and_then(|y| x.checked_add(y)))
            .filter(|&e| e <= bytes.len())
            .ok_or("string table out of range")?;
        let data = &bytes[table_end..];
        let mut last = "";
        for i in 0..n_strings {
            let offset = rd_u32(bytes, strings_off + 8 + i * 8) as usize;
            let str_len = rd_u32(bytes, strings_off + 12 + i * 8) as usize;
            let text = data
                .get(offset..offset + str_len)
                .ok_or("string out of range")?;
            last = std::str::from_utf8(text).map_err(|_| "string is not UTF-8")?;
        }
        serde_json::from_str::<WarningReport>(last)
            .map_err(|e| format!("warning report unreadable: {e}"))?;
        let s_ok = |i: u32| (i as usize) < n_strings;
        let mut next_turn = 0usize;
        for i in 0..n_traces {
            let rec = traces_off + i * TRACE_REC;
            let first = rd_u32(bytes, rec + 8) as usize;
            let num_turns = rd_u32(bytes, rec + 12) as usize;
            if !s_ok(rd_u32(bytes, rec))
                || !s_ok(rd_u32(bytes, rec + 4))
                || first != next_turn
                || rd_u32(bytes, rec + 16) == 0
            {
                return Err(format!("trace record {i} is inconsistent"));
            }
            next_turn = first
                .checked_add(num_turns)
                .filter(|&e| e <= n_turns)
                .ok_or("trace turns out of range")?;
            let mut prev_ids = 0u32;
            for k in first..next_turn {
                let turn_rec = turns_off + k * TURN_REC;
                let lcp = rd_u32(bytes, turn_rec + 40);
                let n_ids = rd_u32(bytes, turn_rec + 44);
                let suffix = rd_u64(bytes, turn_rec + 48);
                let bad_lcp = lcp > n_ids || lcp > prev_ids || (k == first && lcp != 0);
                let bad_pool = suffix
                    .checked_add(u64::from(n_ids - lcp.min(n_ids)))
                    .is_none_or(|e| e > pool_len as u64);
                let bad_str = !(s_ok(rd_u32(bytes, turn_rec + 56))
                    && s_ok(rd_u32(bytes, turn_rec + 60))
                    && s_ok(rd_u32(bytes, turn_rec + 64))
                    && s_ok(rd_u32(bytes, turn_rec + 68)));
                if bad_lcp || bad_pool || bad_str || rd_u32(bytes, turn_rec + 72) > 1 {
                    return Err(format!("turn record {k} is inconsistent"));
                }
                prev_ids = n_ids;
            }
        }
        if next_turn != n_turns {
            return Err("turn records not covered by traces".into());
        }
        as_u32s(&bytes[pool_off..pool_off + pool_len * 4]).ok_or("pool misaligned")?;
        Ok(Layout {
            key,
            n_traces,
            n_turns,
            pool_len,
            subagents,
            traces_off,
            turns_off,
            pool_off,
            strings_off,
            n_strings,
            file_len: bytes.len(),
        })
    }
}

/// How an entry was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A valid entry existed.
    Hit,
    /// Built now (no entry existed).
    Built,
    /// Built now, replacing an invalid entry.
    Rebuilt,
}

/// A directory of cache entries.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    dir: PathBuf,
    root: agentx_record::fsio::LazyRoot,
}

/// The default cache directory: `AGENTX_DATASET_MMAP_CACHE_DIR`, else `AIPERF_DATASET_MMAP_CACHE_DIR`,
/// else `$AGENTX_HOME/datasets`, where `AGENTX_HOME` defaults to `$XDG_CACHE_HOME/agentx` or
/// `~/.cache/agentx`.
/// The dataset cache's directory under the agentx home.
pub const DATASETS_SUBDIR: &str = "datasets";

pub(crate) fn default_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) =
        env("AGENTX_DATASET_MMAP_CACHE_DIR").or_else(|| env("AIPERF_DATASET_MMAP_CACHE_DIR"))
    {
        return dir;
    }
    agentx_home().join(DATASETS_SUBDIR)
}

/// `AGENTX_HOME`, defaulting to `$XDG_CACHE_HOME/agentx` or `~/.cache/agentx`.
pub fn agentx_home() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("AGENTX_HOME")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("agentx")))
        .or_else(|| env("HOME").map(|h| h.join(".cache").join("agentx")))
        .unwrap_or_else(|| PathBuf::from(".agentx"))
}

/// A mapped, validated entry.
#[derive(Debug)]
pub(crate) struct Entry {
    pub path: PathBuf,
    pub map: Mapped,
    pub layout: Layout,
}

enum Probe<T> {
    Missing,
    Invalid(String),
    Valid(T),
}

impl Store {
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Store {
            root: agentx_record::fsio::LazyRoot::new(&dir),
            dir,
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache directory as a capability, created and opened on the first write.
    pub(crate) fn root(&self) -> std::io::Result<&agentx_record::fsio::Root> {
        self.root.get()
    }

    /// The path of the entry for `key`.
    pub(crate) fn entry_path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.{ENTRY_EXT}", key.short_hex()))
    }

    /// Maps the entry for `key` and validates it: its layout, then `check` (which takes the mapped
    /// entry and answers what the caller reads of it, or why it is invalid).
    fn probe<T>(
        &self,
        key: &CacheKey,
        check: &impl Fn(Entry) -> Result<T, String>,
    ) -> Result<Probe<T>, DatasetError> {
        let path = self.entry_path(key);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Missing),
            Err(e) => return Err(DatasetError::io("open", path, e)),
        };
        let map = Mapped::map(&file).map_err(|e| DatasetError::io("map", &path, e))?;
        let layout = match Layout::parse(map.bytes(), Some(key)) {
            Ok(layout) => layout,
            Err(reason) => return Ok(Probe::Invalid(reason)),
        };
        Ok(match check(Entry { path, map, layout }) {
            Ok(v) => Probe::Valid(v),
            Err(reason) => Probe::Invalid(reason),
        })
    }

    /// Maps the valid entry for `key` if there is one, without building.
    pub(crate) fn get(&self, key: &CacheKey) -> Result<Option<Entry>, DatasetError> {
        Ok(match self.probe(key, &Ok)? {
            Probe::Valid(e) => Some(e),
            _ => None,
        })
    }

    /// Maps the entry for `key`, building it with `build` when missing or invalid. Concurrent callers
    /// with the same key build once: the others wait on the lock and map the result.
    pub(crate) fn get_or_build(
        &self,
        key: &CacheKey,
        build: impl FnOnce() -> Result<Vec<u8>, DatasetError>,
    ) -> Result<(Entry, Outcome), DatasetError> {
        self.get_or_build_checked(key, Ok, build)
    }

    /// [`Self::get_or_build`] for entries whose content needs more validation than the layout's:
    /// `check` reads a mapped entry whose layout is valid into what the caller keeps, or says why it is
    /// invalid, and an invalid entry is rebuilt like a damaged one. An entry that fails `check` right
    /// after it was built is an error, not a second build.
    pub(crate) fn get_or_build_checked<T>(
        &self,
        key: &CacheKey,
        check: impl Fn(Entry) -> Result<T, String>,
        build: impl FnOnce() -> Result<Vec<u8>, DatasetError>,
    ) -> Result<(T, Outcome), DatasetError> {
        if let Probe::Valid(v) = self.probe(key, &check)? {
            return Ok((v, Outcome::Hit));
        }
        let root = self
            .root()
            .map_err(|err| DatasetError::io("create cache directory", &self.dir, err))?;
        let lock_name = format!("{}.lock", key.short_hex());
        let lock_path = self.dir.join(&lock_name);
        let lock = root
            .open_for_lock(&lock_name)
            .map_err(|err| DatasetError::io("open lock", &lock_path, err))?;
        lock.lock()
            .map_err(|err| DatasetError::io("lock", &lock_path, err))?;
        // Re-check under the lock: another process may have built the entry while we waited.
        let outcome = match self.probe(key, &check)? {
            Probe::Valid(v) => return Ok((v, Outcome::Hit)),
            Probe::Missing => Outcome::Built,
            Probe::Invalid(reason) => {
                tracing::warn!(entry = %self.entry_path(key).display(), %reason, "rebuilding invalid dataset cache entry");
                Outcome::Rebuilt
            }
        };
        let bytes = build()?;
        let path = self.entry_path(key);
        if let Err(err) = root.write_atomic(format!("{}.{ENTRY_EXT}", key.short_hex()), &bytes) {
            return Err(DatasetError::io("write cache entry", &path, err));
        }
        drop(bytes);
        match self.probe(key, &check)? {
            Probe::Valid(v) => Ok((v, outcome)),
            Probe::Invalid(reason) => Err(DatasetError::Cache {
                path,
                reason: format!("entry invalid right after writing it: {reason}"),
            }),
            Probe::Missing => Err(DatasetError::Cache {
                path,
                reason: "entry vanished right after writing it".into(),
            }),
        }
    }
}
