//! Generates the gRPC client of `lograft.v1.Broker` from `../../proto/broker.proto`.
//!
//! `protoc` comes from the `protoc-bin-vendored` crate, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/broker.proto";
    println!("cargo:rerun-if-changed={proto}");
    // Build scripts run single-threaded; prost-build reads PROTOC below.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_protos(&[proto], &["../../proto"])?;
    Ok(())
}
