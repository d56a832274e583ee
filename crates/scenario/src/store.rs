//! Scenario references and the local content-addressed scenario store.
//!
//! A reference is a path (`agentx-mvp.wasm`), a pinned path (`agentx-mvp.wasm@sha256:<hex>`), or a
//! reference into the store: `sha256:<hex or unique prefix>` or a scenario name as `describe`
//! reports it. Store entries live at `<home>/scenarios/sha256/<hex>.wasm` with a metadata file
//! beside them; every file is written to a temporary file in the same directory, fsynced and renamed
//! into place, so a reader never sees a partial entry. A store entry is always loaded pinned to its
//! own hash, so a corrupted file is detected.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ScenarioError;

/// Where a scenario comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScenarioRef {
    /// A file, optionally pinned to a sha256.
    File { path: PathBuf, pin: Option<String> },
    /// A full hash or unique prefix in the store.
    Hash(String),
    /// A scenario name in the store (the newest entry of that name).
    Name(String),
}

impl ScenarioRef {
    /// Parse a reference as the user wrote it.
    pub(crate) fn parse(given: &str) -> Result<ScenarioRef, ScenarioError> {
        let bad = |reason: &str| ScenarioError::BadReference {
            reference: given.to_string(),
            reason: reason.to_string(),
        };
        if given.is_empty() {
            return Err(bad("it is empty"));
        }
        if let Some(hex) = given.strip_prefix("sha256:") {
            check_hex(hex, 8).map_err(|r| bad(&r))?;
            return Ok(ScenarioRef::Hash(hex.to_ascii_lowercase()));
        }
        if let Some((path, pin)) = given.rsplit_once("@sha256:") {
            check_hex(pin, 64).map_err(|r| bad(&r))?;
            if pin.len() != 64 {
                return Err(bad("a pin must be the full 64-hex-digit sha256"));
            }
            return Ok(ScenarioRef::File {
                path: PathBuf::from(path),
                pin: Some(pin.to_ascii_lowercase()),
            });
        }
        let path = Path::new(given);
        if path.exists()
            || given.contains('/')
            || path
                .extension()
                .is_some_and(|extension| extension.eq_ignore_ascii_case("wasm"))
        {
            return Ok(ScenarioRef::File {
                path: path.to_path_buf(),
                pin: None,
            });
        }
        Ok(ScenarioRef::Name(given.to_string()))
    }
}

fn check_hex(hex: &str, min: usize) -> Result<(), String> {
    if hex.len() < min || hex.len() > 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "expected {min} to 64 hex digits of a sha256 after `sha256:`, got `{hex}`"
        ));
    }
    Ok(())
}

/// What the store records about an entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredScenario {
    /// The sha256 of the component bytes, lowercase hex (the entry's file name).
    pub sha256: String,
    /// The scenario's name, as its `describe` reports it.
    pub name: String,
    /// The scenario's version, as its `describe` reports it.
    pub version: String,
    /// The scenario's description, as its `describe` reports it.
    pub description: String,
    /// The component's size, in bytes.
    pub size: u64,
    /// Seconds since the Unix epoch when the entry was added.
    pub added_unix: u64,
    /// The path it was added from.
    pub source: String,
}

/// The content-addressed scenario store under the agentx cache directory.
#[derive(Debug, Clone)]
pub struct ScenarioStore {
    dir: PathBuf,
    root: agentx_record::fsio::LazyRoot,
}

impl ScenarioStore {
    /// The store at `<home>/scenarios`.
    pub fn new(home: &Path) -> ScenarioStore {
        let dir = home.join("scenarios").join("sha256");
        ScenarioStore {
            root: agentx_record::fsio::LazyRoot::new(&dir),
            dir,
        }
    }

    fn io(&self, source: std::io::Error) -> ScenarioError {
        ScenarioError::Store {
            path: self.dir.clone(),
            source,
        }
    }

    /// The file holding the component of a full hash.
    pub(crate) fn wasm_path(&self, hash: &str) -> PathBuf {
        self.dir.join(format!("{hash}.wasm"))
    }

    /// Add component bytes under their hash with the given metadata.
    pub fn add(&self, bytes: &[u8], meta: &StoredScenario) -> Result<PathBuf, ScenarioError> {
        let root = self.root.get().map_err(|e| self.io(e))?;
        let path = root
            .write_atomic(format!("{}.wasm", meta.sha256), bytes)
            .map_err(|e| self.io(e))?;
        let json = serde_json::to_vec_pretty(meta).map_err(|e| self.io(e.into()))?;
        root.write_atomic(format!("{}.json", meta.sha256), &json)
            .map_err(|e| self.io(e))?;
        Ok(path)
    }

    /// Every entry, newest first. Entries whose metadata cannot be read are skipped with a warning.
    pub fn list(&self) -> Result<Vec<StoredScenario>, ScenarioError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(self.io(error)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry.map_err(|error| self.io(error))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                match std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
                {
                    Ok(meta) => out.push(meta),
                    Err(error) => {
                        tracing::warn!("skipping store entry {}: {error}", path.display());
                    }
                }
            }
        }
        out.sort_by(|a: &StoredScenario, b| {
            b.added_unix
                .cmp(&a.added_unix)
                .then(a.sha256.cmp(&b.sha256))
        });
        Ok(out)
    }

    /// Find the file and the pin for a reference.
    pub(crate) fn locate(
        &self,
        reference: &ScenarioRef,
    ) -> Result<(PathBuf, Option<String>), ScenarioError> {
        let not_found = |shown: &str| ScenarioError::NotInStore {
            reference: shown.to_string(),
            store: self.dir.clone(),
        };
        match reference {
            ScenarioRef::File { path, pin } => Ok((path.clone(), pin.clone())),
            ScenarioRef::Hash(prefix) => {
                let all = self.list()?;
                let hits: Vec<&StoredScenario> = all
                    .iter()
                    .filter(|m| m.sha256.starts_with(prefix.as_str()))
                    .collect();
                match hits.as_slice() {
                    [] => Err(not_found(&format!("sha256:{prefix}"))),
                    [one] => Ok((self.wasm_path(&one.sha256), Some(one.sha256.clone()))),
                    many => Err(ScenarioError::Ambiguous {
                        reference: format!("sha256:{prefix}"),
                        candidates: many
                            .iter()
                            .map(|m| format!("sha256:{} ({})", m.sha256, m.name))
                            .collect(),
                    }),
                }
            }
            ScenarioRef::Name(name) => {
                let all = self.list()?;
                let hit = all
                    .iter()
                    .find(|m| &m.name == name)
                    .ok_or_else(|| not_found(name))?;
                Ok((self.wasm_path(&hit.sha256), Some(hit.sha256.clone())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let h = "ab".repeat(32);
        assert_eq!(
            ScenarioRef::parse(&format!("x.wasm@sha256:{h}")).unwrap(),
            ScenarioRef::File {
                path: "x.wasm".into(),
                pin: Some(h.clone())
            }
        );
        assert_eq!(
            ScenarioRef::parse("sha256:ABCDEF12").unwrap(),
            ScenarioRef::Hash("abcdef12".into())
        );
        assert_eq!(
            ScenarioRef::parse("inferencex-agentx-mvp").unwrap(),
            ScenarioRef::Name("inferencex-agentx-mvp".into())
        );
        assert!(matches!(
            ScenarioRef::parse("dist/a.wasm").unwrap(),
            ScenarioRef::File { pin: None, .. }
        ));
        assert!(ScenarioRef::parse("sha256:abc").is_err());
        assert!(ScenarioRef::parse("x.wasm@sha256:abcd").is_err());
        assert!(ScenarioRef::parse("").is_err());
    }

    #[test]
    fn store_adds_lists_and_locates() {
        let home = tempfile::tempdir().unwrap();
        let store = ScenarioStore::new(home.path());
        assert!(store.list().unwrap().is_empty());
        let meta = |hash: &str, t| StoredScenario {
            sha256: hash.into(),
            name: "s".into(),
            version: "1".into(),
            description: String::new(),
            size: 3,
            added_unix: t,
            source: "x".into(),
        };
        let (a, b) = ("aa11".repeat(16), "aa22".repeat(16));
        store.add(b"one", &meta(&a, 1)).unwrap();
        store.add(b"two", &meta(&b, 2)).unwrap();
        assert_eq!(store.list().unwrap().len(), 2);
        let (p, pin) = store.locate(&ScenarioRef::Name("s".into())).unwrap();
        assert_eq!(pin.as_deref(), Some(b.as_str()));
        assert_eq!(std::fs::read(p).unwrap(), b"two");
        assert!(matches!(
            store.locate(&ScenarioRef::Hash("aa".into())),
            Err(ScenarioError::Ambiguous { .. })
        ));
        assert!(matches!(
            store.locate(&ScenarioRef::Hash("ff".into())),
            Err(ScenarioError::NotInStore { .. })
        ));
    }
}
