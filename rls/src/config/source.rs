//! Where the configuration comes from: a directory of YAML files, as envoyproxy/ratelimit reads
//! `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`, and what tells that it changed.

use super::{load, Config, ConfigError, Source};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What the directory held when it was read: each file's path, length, modification time, inode and a
/// hash of its text. A different value means the configuration may have changed (a file edited, added,
/// removed, or a Kubernetes ConfigMap's `..data` symlink swapped); the text's hash catches a rewrite of
/// the same length within the file system's timestamp tick, which the length and time alone miss.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Watched(Vec<(PathBuf, u64, Option<SystemTime>, u64, u64)>);

/// The YAML files under `dir` (`*.yaml`, `*.yml`, in subdirectories too), sorted by path. Names starting
/// with `.` are skipped: they are editors' swap files and the timestamped directories of a ConfigMap,
/// whose files are also reached through the visible symlinks.
fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at)? {
            let path = entry?.path();
            if path.file_name().and_then(|n| n.to_str()).is_none_or(|n| n.starts_with('.')) {
                continue;
            }
            // Follows symlinks (ConfigMaps are made of them).
            let meta = std::fs::metadata(&path)?;
            if meta.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// What `dir` holds now, to compare with what it held when last read.
pub fn watched(dir: &Path) -> Watched {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let Ok(paths) = files(dir) else { return Watched::default() };
    Watched(
        paths
            .into_iter()
            .map(|p| {
                let meta = std::fs::metadata(&p).ok();
                let len = meta.as_ref().map_or(0, |m| m.len());
                let inode = meta.as_ref().map_or(0, |m| m.ino());
                let modified = meta.and_then(|m| m.modified().ok());
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap_or_default().hash(&mut hasher);
                (p, len, modified, inode, hasher.finish())
            })
            .collect(),
    )
}

/// Reads and loads every YAML file under `dir`.
pub fn read_dir(dir: &Path, merge_domains: bool) -> Result<(Config, Watched), ConfigError> {
    let seen = watched(dir);
    let paths = files(dir).map_err(|e| ConfigError {
        file: dir.to_path_buf(),
        line: 0,
        reason: format!("cannot read the configuration directory: {e}"),
    })?;
    let mut texts = Vec::with_capacity(paths.len());
    for path in &paths {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.clone(),
            line: 0,
            reason: format!("cannot read: {e}"),
        })?;
        texts.push(text);
    }
    let sources: Vec<Source<'_>> =
        paths.iter().zip(&texts).map(|(path, text)| Source { path, text }).collect();
    Ok((load(&sources, merge_domains)?, seen))
}
