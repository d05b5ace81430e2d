#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| driftgate_fuzz::admission_review_structured(data));
