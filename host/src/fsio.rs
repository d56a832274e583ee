//! Durable file replacement shared by the caches and stores.

use std::io::Write;
use std::path::Path;

/// Write `data` to `path` through a temporary file in the same directory, fsynced and renamed, so
/// readers see the old file or the new one, never a part; the directory is synced afterwards so the
/// rename itself survives a crash (best effort where directories cannot be opened).
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    // Temporary files are created owner-only; results are read by other users' pipelines.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
