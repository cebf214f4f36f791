//! Fuzz target `hami_codecs`: see `gpusched_fuzz::hami_codecs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpusched_fuzz::hami_codecs(data));
