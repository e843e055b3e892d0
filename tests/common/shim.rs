//! Small C helpers from tests/support, built once per test process with the system C compiler.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// Builds tests/support/`name`.c into a shared object; None, with a message, when it cannot be built.
pub fn build(name: &str) -> Option<PathBuf> {
    static BUILT: Mutex<Option<HashMap<String, Option<PathBuf>>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .get_or_insert_with(HashMap::new)
        .entry(name.to_string())
        .or_insert_with(|| {
            let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/support/{name}.c"));
            let out = std::env::temp_dir().join(format!("rl-{name}-{}.so", std::process::id()));
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let status = std::process::Command::new(&cc)
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&out)
                .arg(&source)
                .status();
            match status {
                Ok(s) if s.success() => Some(out),
                _ => {
                    testkit::skip(&format!("cannot build {} with {cc}", source.display()));
                    None
                }
            }
        })
        .clone()
}
