//! Source identity: the sha256 digest of a corpus's bytes, and a small index that remembers digests by
//! file metadata so opening an unchanged corpus does not re-hash it.
//!
//! The digest of a `traces.jsonl` is sha256 of its bytes; of a directory, sha256 over each `*.json` file
//! (in name order) of its name, length and bytes. The index entry `<cache>/sources/<hash of path>`
//! stores (metadata fingerprint, digest); it is trusted only while path, length, modification time and
//! inode all match, and is rewritten atomically.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::DatasetError;
use super::weka::SourceFiles;

fn files_of(source: &SourceFiles) -> Vec<PathBuf> {
    match source {
        SourceFiles::Jsonl(p) => vec![p.clone()],
        SourceFiles::Dir { files, .. } => files.clone(),
    }
}

/// sha256 over the source content (see the module doc).
pub(crate) fn digest(source: &SourceFiles) -> Result<[u8; 32], DatasetError> {
    let mut hasher = Sha256::new();
    let dir = matches!(source, SourceFiles::Dir { .. });
    let mut buf = vec![0u8; 1 << 20];
    for path in files_of(source) {
        let mut file = File::open(&path).map_err(|e| DatasetError::io("open", &path, e))?;
        if dir {
            let name = path
                .file_name()
                .map(|read| read.to_string_lossy().into_owned())
                .unwrap_or_default();
            let len = file
                .metadata()
                .map_err(|e| DatasetError::io("stat", &path, e))?
                .len();
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update(len.to_le_bytes());
        }
        loop {
            let read = file
                .read(&mut buf)
                .map_err(|e| DatasetError::io("read", &path, e))?;
            if read == 0 {
                break;
            }
            hasher.update(&buf[..read]);
        }
    }
    Ok(hasher.finalize().into())
}

/// A hash of the metadata of every file of the source; changes whenever a file may have changed.
fn fingerprint(source: &SourceFiles) -> Result<[u8; 32], DatasetError> {
    let mut hasher = Sha256::new();
    hasher.update(b"agentx-source-fingerprint-v1\0");
    for path in files_of(source) {
        let meta = fs::metadata(&path).map_err(|e| DatasetError::io("stat", &path, e))?;
        let canon = fs::canonicalize(&path).unwrap_or(path.clone());
        hasher.update(canon.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update(meta.len().to_le_bytes());
        let mtime = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        hasher.update(mtime.to_le_bytes());
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            hasher.update(meta.ino().to_le_bytes());
            hasher.update(meta.dev().to_le_bytes());
        }
    }
    Ok(hasher.finalize().into())
}

/// The index file of `source`, relative to the cache directory.
fn index_name(source: &SourceFiles) -> PathBuf {
    let canon = fs::canonicalize(source.path()).unwrap_or_else(|_| source.path().to_owned());
    let name = hex::encode(&Sha256::digest(canon.to_string_lossy().as_bytes())[..16]);
    Path::new("sources").join(name)
}

/// The digest of `source`, from the index when the fingerprint matches, else computed (and indexed).
/// Returns the digest and whether it was computed now.
pub(crate) fn digest_cached(
    cache: &super::cache::Store,
    source: &SourceFiles,
) -> Result<([u8; 32], bool), DatasetError> {
    let stamp = fingerprint(source)?;
    let rel = index_name(source);
    let idx = cache.dir().join(&rel);
    if let Ok(text) = fs::read_to_string(&idx) {
        let mut parts = text.split_whitespace();
        if let (Some("agentx-source-v1"), Some(recorded_fp), Some(source_digest)) =
            (parts.next(), parts.next(), parts.next())
        {
            if recorded_fp == hex::encode(stamp) {
                if let Ok(Ok(source_digest)) = hex::decode(source_digest).map(<[u8; 32]>::try_from)
                {
                    return Ok((source_digest, false));
                }
            }
        }
    }
    let source_digest = digest(source)?;
    // Best effort: a read-only cache directory only costs a re-hash next time.
    let write = || -> std::io::Result<()> {
        let line = format!(
            "agentx-source-v1 {} {}\n",
            hex::encode(stamp),
            hex::encode(source_digest)
        );
        cache.root()?.write_atomic(&rel, line.as_bytes()).map(drop)
    };
    if let Err(err) = write() {
        tracing::debug!(index = %idx.display(), error = %err, "cannot record the source digest");
    }
    Ok((source_digest, true))
}
