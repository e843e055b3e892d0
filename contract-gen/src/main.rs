//! `cargo run -p contract-gen` writes every generated file again; `--check` writes nothing and fails
//! (exit 1) naming each file that differs from what the reference writes now.

use std::path::Path;
use std::process::ExitCode;

/// `path` from the repository's root.
fn shown(path: &Path) -> String {
    path.strip_prefix(contract_gen::root()).unwrap_or(path).display().to_string()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => match contract_gen::write() {
            Ok(written) => {
                for path in &written {
                    println!("wrote {}", shown(path));
                }
                println!("{} file(s) written; the others were current", written.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("contract-gen: {e}");
                ExitCode::FAILURE
            }
        },
        ["--check"] => {
            let stale = contract_gen::stale();
            for path in &stale {
                eprintln!("stale: {}", shown(path));
            }
            if stale.is_empty() {
                println!("every generated file is current");
                ExitCode::SUCCESS
            } else {
                eprintln!("write them again with `cargo run -p contract-gen`");
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!("usage: contract-gen [--check]");
            ExitCode::from(2)
        }
    }
}
