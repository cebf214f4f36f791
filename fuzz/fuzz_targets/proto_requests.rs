//! Fuzz target `proto_requests`: see `gpusched_fuzz::proto_requests`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpusched_fuzz::proto_requests(data));
