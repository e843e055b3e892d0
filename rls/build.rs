//! Compiles Envoy's rate limit API (the subset in proto/) with protox, a protobuf compiler in Rust, so
//! the build needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/envoy/service/ratelimit/v3/rls.proto"];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
