//! Fuzz target `annotations`: see `gpusched_fuzz::annotations`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpusched_fuzz::annotations(data));
