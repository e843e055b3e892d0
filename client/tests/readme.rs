//! The axum example shown in README.md and in docs/client.md is `examples/axum_app.rs`'s marked
//! region, verbatim: the example is compiled (and linted) with the crate, so the pages' program
//! compiles too.

use std::path::Path;

fn region(source: &str, lang: &str) -> String {
    let (start, end) = (format!("// [readme:{lang}]\n"), format!("// [/readme:{lang}]"));
    let from = source.find(&start).expect("the start marker") + start.len();
    let to = source[from..].find(&end).expect("the end marker") + from;
    source[from..to].to_string()
}

#[test]
fn the_readme_and_the_client_guide_show_the_axum_example_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/axum_app.rs")).unwrap();
    let snippet = region(&example, "rust");
    assert!(snippet.contains("fn main"), "the region is the whole program");
    for page in ["../README.md", "../docs/client.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        assert!(
            text.contains(&format!("```rust\n{snippet}```\n")),
            "{page} does not show examples/axum_app.rs's marked region verbatim (a ```rust block); \
             copy it from there:\n{snippet}"
        );
    }
}
