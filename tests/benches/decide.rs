//! How long one admission review takes: parsing the body, deciding, and both, on a ~30 KB
//! Flux server-side-apply UPDATE of a Deployment; and the same UPDATE made by a person with
//! `kubectl edit`, which computes the diff and is denied.
//!
//! `cargo bench --bench decide`

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use driftgate::decision::{Decision, DecisionInput, decide};
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use driftgate::review::parse_review;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::json;

/// The same allocator as the binary, so the figures are the service's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/example.yaml");
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/bench-deployment-update-30k.json"
);
const NOW: &str = "2026-11-30T09:00:00Z";

/// Describes the request and decides it, as the server does for each review.
fn decide_at(
    policies: &PolicySet,
    request: &AdmissionRequest<DynamicObject>,
    now: Timestamp,
) -> Decision {
    let facts = RequestFacts::new(request);
    let input = DecisionInput {
        request: &facts,
        resource: None,
        namespace: None,
        parent: None,
        recent_deletes: None,
        now,
        silence: None,
    };
    decide(policies, &input)
}

/// The same UPDATE, made by a person through `kubectl edit`.
fn human_edit(request: &AdmissionRequest<DynamicObject>) -> AdmissionRequest<DynamicObject> {
    let mut request = request.clone();
    request.user_info.username = Some("bob".to_owned());
    request.user_info.groups = Some(vec!["system:authenticated".to_owned()]);
    match &mut request.options {
        Some(RawExtension(options)) if options.is_object() => {
            options["fieldManager"] = json!("kubectl-edit");
        }
        options => *options = Some(RawExtension(json!({"fieldManager": "kubectl-edit"}))),
    }
    request
}

fn benches(c: &mut Criterion) {
    let policies = PolicySet::load(Path::new(POLICY))
        .unwrap_or_else(|errors| panic!("{POLICY} does not load:\n{errors}"));
    let body = std::fs::read(FIXTURE).unwrap_or_else(|error| panic!("{FIXTURE}: {error}"));
    let now: Timestamp = NOW.parse().unwrap();
    let request = parse_review(&body).unwrap_or_else(|error| panic!("{FIXTURE}: {error}"));
    let edited = human_edit(&request);

    // The benchmarks measure what they claim only if the fixture takes the intended paths.
    let flux = decide_at(&policies, &request, now);
    assert!(
        flux.allowed,
        "the fixture's Flux UPDATE should be admitted: {:?} {}",
        flux.record.rule, flux.message
    );
    let bob = decide_at(&policies, &edited, now);
    assert!(
        !bob.allowed && !bob.record.changed_fields.is_empty(),
        "the human edit should be denied after a diff: {:?} {:?}",
        bob.record.rule,
        bob.record.changed_fields
    );
    eprintln!(
        "fixture: {} bytes; Flux: {} ({}); bob: {} ({} changed fields)",
        body.len(),
        flux.record.rule,
        flux.record.verdicts.len(),
        bob.record.rule,
        bob.record.changed_fields.len()
    );

    let mut parse = c.benchmark_group("parse");
    parse.throughput(Throughput::Bytes(body.len() as u64));
    parse.bench_function("parse_review", |b| {
        b.iter(|| parse_review(black_box(&body)).unwrap())
    });
    parse.bench_function("parse_and_decide", |b| {
        b.iter(|| {
            let request = parse_review(black_box(&body)).unwrap();
            decide_at(black_box(&policies), &request, black_box(now))
        })
    });
    parse.finish();

    c.bench_function("decide", |b| {
        b.iter(|| decide_at(black_box(&policies), black_box(&request), black_box(now)))
    });
    c.bench_function("decide_human_edit", |b| {
        b.iter(|| decide_at(black_box(&policies), black_box(&edited), black_box(now)))
    });
}

criterion_group!(decide_benches, benches);
criterion_main!(decide_benches);
