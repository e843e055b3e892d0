//! The examples shown in README.md and in docs/client.md are marked regions of `examples/*.rs`,
//! verbatim: the examples are compiled (and linted) with the crate, and `tests/examples.rs` runs the
//! workers' and the hyper one against a real server, so the pages' programs compile and work too.

use std::path::Path;

fn region(source: &str, lang: &str) -> String {
    let (start, end) = (format!("// [readme:{lang}]\n"), format!("// [/readme:{lang}]"));
    let from = source.find(&start).expect("the start marker") + start.len();
    let to = source[from..].find(&end).expect("the end marker") + from;
    source[from..to].to_string()
}

/// `pages` show `example`'s region marked `lang` as a ```rust block.
fn assert_shown(example: &str, lang: &str, pages: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("examples").join(example)).unwrap();
    let snippet = region(&source, lang);
    assert!(snippet.contains("fn main"), "the region is the whole program");
    for page in pages {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        assert!(
            text.contains(&format!("```rust\n{snippet}```\n")),
            "{page} does not show examples/{example}'s marked region verbatim (a ```rust block); \
             copy it from there:\n{snippet}"
        );
    }
}

#[test]
fn the_readme_and_the_client_guide_show_the_axum_example_verbatim() {
    assert_shown("axum_app.rs", "rust", &["../README.md", "../docs/client.md"]);
}

#[test]
fn the_client_guide_shows_the_workers_and_the_hyper_examples_verbatim() {
    assert_shown("worker.rs", "worker", &["../docs/client.md"]);
    assert_shown("hyper_app.rs", "hyper", &["../docs/client.md"]);
}
