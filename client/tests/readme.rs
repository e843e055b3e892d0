//! The README's Rust example is `examples/axum_app.rs`'s marked region, verbatim: the example is
//! compiled (and linted) with the crate, so the README's program compiles too.

use std::path::Path;

fn region(source: &str, lang: &str) -> String {
    let (start, end) = (format!("// [readme:{lang}]\n"), format!("// [/readme:{lang}]"));
    let from = source.find(&start).expect("the start marker") + start.len();
    let to = source[from..].find(&end).expect("the end marker") + from;
    source[from..to].to_string()
}

#[test]
fn the_readme_shows_the_axum_example_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/axum_app.rs")).unwrap();
    let readme = std::fs::read_to_string(root.join("../README.md")).unwrap();
    let snippet = region(&example, "rust");
    assert!(snippet.contains("fn main"), "the region is the whole program");
    assert!(
        readme.contains(&format!("```rust\n{snippet}```\n")),
        "README.md does not show examples/axum_app.rs's marked region verbatim (a ```rust block); \
         copy it from there:\n{snippet}"
    );
}
