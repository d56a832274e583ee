//! The host's writable directories, each opened once as a `cap-std` directory capability, and the
//! durable file replacement every store, cache and export goes through.
//!
//! A [`Root`] is the `AGENTX_HOME` scenario store, a dataset cache, an artifact directory or the
//! directory of a file the user named (`report -o FILE`). Every path handed to it is relative and
//! resolved by `cap-std` beneath the opened directory: an absolute path, a `..` that climbs out or a
//! symlink leading elsewhere fails with an error instead of writing outside it.

use std::io::Write;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions};
use rand::RngExt;

/// The link beside per-run artifact directories that names the newest one (`artifacts/latest`).
pub const LATEST_LINK: &str = "latest";

/// A directory opened once as a capability, with the path it was opened at (for messages).
#[derive(Debug)]
pub struct Root {
    dir: Dir,
    path: PathBuf,
}

impl Root {
    /// Creates `path` (and its parents) if needed and opens it. This is the one place the host uses
    /// ambient authority to reach a directory it writes into.
    pub fn create(path: &Path) -> std::io::Result<Root> {
        std::fs::create_dir_all(path)?;
        Root::open(path)
    }

    /// Opens the existing directory `path`.
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let dir = Dir::open_ambient_dir(path, cap_std::ambient_authority())?;
        Ok(Root {
            dir,
            path: path.to_owned(),
        })
    }

    /// The directory a file the user named lives in (created if needed), and the file's name in it.
    pub fn for_file(file: &Path) -> std::io::Result<(Root, PathBuf)> {
        let name = file.file_name().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} does not name a file", file.display()),
            )
        })?;
        let parent = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok((Root::create(parent)?, PathBuf::from(name)))
    }

    /// Where an export of the artifact directory `dir` goes: `out` (a file the user named, through
    /// its own directory) or `dir/default`. Returns the directory, the file's name in it, and the
    /// full path for messages.
    pub fn for_output(
        dir: &Path,
        out: Option<&Path>,
        default: &str,
    ) -> Result<(Root, PathBuf), (PathBuf, std::io::Error)> {
        match out {
            Some(p) => Root::for_file(p).map_err(|e| (p.to_owned(), e)),
            None => Root::open(dir)
                .map(|r| (r, PathBuf::from(default)))
                .map_err(|e| (dir.join(default), e)),
        }
    }

    /// The path the directory was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `rel` beneath this directory, for messages and for readers.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// Creates the subdirectory `rel` (and its parents) if needed and opens it.
    pub fn subdir(&self, rel: impl AsRef<Path>) -> std::io::Result<Root> {
        let rel = rel.as_ref();
        self.dir.create_dir_all(rel)?;
        Ok(Root {
            dir: self.dir.open_dir(rel)?,
            path: self.path.join(rel),
        })
    }

    /// Creates (truncating) the file `rel` for writing.
    pub fn create_file(&self, rel: impl AsRef<Path>) -> std::io::Result<std::fs::File> {
        let file = self.dir.open_with(
            rel.as_ref(),
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        Ok(file.into_std())
    }

    /// Opens (creating, not truncating) the file `rel` for writing, e.g. a lock file.
    pub fn open_for_lock(&self, rel: impl AsRef<Path>) -> std::io::Result<std::fs::File> {
        let file = self.dir.open_with(
            rel.as_ref(),
            OpenOptions::new().write(true).create(true).truncate(false),
        )?;
        Ok(file.into_std())
    }

    /// Cuts the file `rel` to its first `len` bytes (a torn last line off a log).
    pub fn truncate(&self, rel: impl AsRef<Path>, len: u64) -> std::io::Result<()> {
        let file = self
            .dir
            .open_with(rel.as_ref(), OpenOptions::new().write(true))?;
        file.into_std().set_len(len)
    }

    /// Reads the file `rel`.
    pub fn read(&self, rel: impl AsRef<Path>) -> std::io::Result<Vec<u8>> {
        self.dir.read(rel.as_ref())
    }

    /// Renames `from` to `to`, both beneath this directory.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> std::io::Result<()> {
        self.dir.rename(from.as_ref(), &self.dir, to.as_ref())
    }

    /// Removes the file `rel` beneath this directory; a file that is not there is not an error.
    pub fn remove_file_if_present(&self, rel: impl AsRef<Path>) -> std::io::Result<()> {
        match self.dir.remove_file(rel.as_ref()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// Points the symlink `link` at `target` (a name relative to this directory), replacing an
    /// earlier link atomically: readers see the old target or the new one.
    #[cfg(unix)]
    pub fn replace_symlink(&self, target: impl AsRef<Path>, link: &str) -> std::io::Result<()> {
        let tmp = format!(".{link}.{:016x}.tmp", rand::rng().random::<u64>());
        self.dir.symlink(target.as_ref(), &tmp)?;
        self.dir.rename(&tmp, &self.dir, link).inspect_err(|_| {
            let _ = self.dir.remove_file(&tmp);
        })
    }

    /// Writes `data` to `rel` through a temporary file in the same directory, fsynced and renamed,
    /// so readers see the old file or the new one, never a part; the directory is synced afterwards
    /// so the rename itself survives a crash. Returns the full path written.
    pub fn write_atomic(&self, rel: impl AsRef<Path>, data: &[u8]) -> std::io::Result<PathBuf> {
        self.write_atomic_with(rel, |w| w.write_all(data))
    }

    /// As [`Root::write_atomic`], with the contents written by `write` through a buffer (an export
    /// too large to build in memory first).
    pub fn write_atomic_with(
        &self,
        rel: impl AsRef<Path>,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<PathBuf> {
        let rel = rel.as_ref();
        let name = rel.file_name().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} does not name a file", rel.display()),
            )
        })?;
        let sub;
        let (dir, name) = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => {
                sub = self.subdir(p)?;
                (&sub.dir, name)
            }
            _ => (&self.dir, name),
        };
        let tmp = format!(
            ".{}.{:016x}.tmp",
            name.to_string_lossy(),
            rand::rng().random::<u64>()
        );
        let written = (|| {
            let created = dir.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
            let mut writer = std::io::BufWriter::with_capacity(1 << 20, created.into_std());
            write(&mut writer)?;
            let synced = writer
                .into_inner()
                .map_err(std::io::IntoInnerError::into_error)?;
            // Results are read by other users' pipelines.
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                synced.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            }
            synced.sync_all()?;
            dir.rename(&tmp, dir, name)
        })();
        if let Err(error) = written {
            let _ = dir.remove_file(&tmp);
            return Err(error);
        }
        if let Ok(dir_handle) = dir.try_clone() {
            let _ = dir_handle.into_std_file().sync_all();
        }
        Ok(self.path.join(rel))
    }
}

/// A [`Root`] opened the first time something is written beneath it (a store or cache that a
/// read-only command never touches), then kept and shared by clones.
#[derive(Debug, Clone)]
pub struct LazyRoot {
    path: PathBuf,
    root: std::sync::Arc<std::sync::OnceLock<Root>>,
}

impl LazyRoot {
    /// The directory at `path`, not yet created or opened.
    pub fn new(path: impl Into<PathBuf>) -> LazyRoot {
        LazyRoot {
            path: path.into(),
            root: std::sync::Arc::default(),
        }
    }

    /// The path of the directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory, created and opened on first use.
    pub fn get(&self) -> std::io::Result<&Root> {
        if let Some(root) = self.root.get() {
            return Ok(root);
        }
        let created = Root::create(&self.path)?;
        Ok(self.root.get_or_init(|| created))
    }
}

/// Writes a file the user named by path (`report -o FILE`): its directory is opened as a [`Root`]
/// and the file replaced through [`Root::write_atomic`].
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let (root, name) = Root::for_file(path)?;
    root.write_atomic(name, data).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_beneath_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::create(&d.path().join("art")).unwrap();
        let p = root.write_atomic("a/b.json", b"{}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        assert_eq!(p, d.path().join("art/a/b.json"));
        // Replacing keeps no temporary files behind.
        root.write_atomic("a/b.json", b"[]").unwrap();
        let names: Vec<_> = std::fs::read_dir(d.path().join("art/a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("b.json")]);
        assert!(root.write_atomic("../escape", b"x").is_err());
        assert!(root.write_atomic("/tmp/escape", b"x").is_err());
        assert!(root.create_file("../escape").is_err());
        assert!(!d.path().join("escape").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_out_of_the_root_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = Root::create(&d.path().join("art")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("art/out")).unwrap();
        assert!(root.write_atomic("out/x", b"x").is_err());
        assert!(root.create_file("out/y").is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            let p = root.write_atomic("r.json", b"1").unwrap();
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777
        };
        assert_eq!(mode, 0o644);
    }
}
