//! The README's configurations load as they are written.

use redis_ratelimit_rls::config::{load, Source};
use std::path::Path;

#[test]
fn the_readme_s_configurations_load() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .filter(|b| b.starts_with("domain:"))
        .collect();
    assert_eq!(blocks.len(), 4, "the configuration and the extension's three");
    for block in blocks {
        let config = load(&[Source { path: Path::new("README.md"), text: block }], false).unwrap();
        assert_eq!(config.domains().count(), 1);
    }
}
