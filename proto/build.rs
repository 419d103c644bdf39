//! Compiles floe.proto with protox (a pure-Rust protobuf compiler), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=floe.proto");
    let descriptors = protox::compile(["floe.proto"], ["."])?;
    // `bytes` fields as `Bytes`: shuffle buffers pass through without a copy.
    tonic_prost_build::configure()
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
