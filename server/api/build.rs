//! Generates the Rust protobuf and gRPC code from `proto/` with protox (no system protoc).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The run-time variable, not `env!`: a build script compiled in one checkout may be reused
    // for another through a shared target directory, and must not read the first one's protos.
    let proto_root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        "gpusched/v1/types.proto",
        "gpusched/v1/placement.proto",
        "gpusched/v1/inventory.proto",
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", proto_root.join(file).display());
    }
    let fds = protox::compile(files, [&proto_root])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("gpusched_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .btree_map(".")
        .codec_path("crate::codec::SliceCodec")
        .compile_fds(fds)?;
    Ok(())
}
