#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| driftgate_fuzz::policy_load(data));
