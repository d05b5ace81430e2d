//! How long one admission review takes: parsing the body, deciding, and both, on a ~30 KB
//! Flux server-side-apply UPDATE of a Deployment; the same UPDATE made by a person with
//! `kubectl edit`, which computes the diff and is denied; a small ConfigMap edit by a person;
//! and a Pod CREATE no policy guards.
//!
//! Each review is read both ways: `two_step` is `review::parse_review` (the envelope, then
//! both objects built whole), as `eval` and the server's fallback read; `lazy` is the server's
//! request path (`review::lazy`: one pass, the objects' heads, the rest only when a rule asks).
//!
//! `cargo bench --bench decide`
//!
//! On a machine whose speed drifts, differences of a few percent are better seen in
//! instructions than in time: `DECIDE_COUNT=<case>:<iterations>` runs one case a fixed number
//! of times and nothing else, for valgrind to count (BENCHMARKS.md, "Counted, not timed").

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group};
use driftgate::decision::{Decision, DecisionInput, decide};
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use driftgate::review::lazy::parse_lazily;
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
const SMALL_EDIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/namespace-window-configmap-edit.json"
);
const POD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/replicaset-controller-create-pod.json"
);
const NOW: &str = "2026-11-30T09:00:00Z";

/// Describes the request and decides it, as `eval` and the server's fallback do.
fn decide_at(
    policies: &PolicySet,
    request: &AdmissionRequest<DynamicObject>,
    now: Timestamp,
) -> Decision {
    decide_facts(policies, &RequestFacts::new(request), now)
}

/// Reads the body in one pass and decides it, as the server's request path does: a review a
/// policy may guard has its objects' heads read (`guarded`), any other only its envelope.
fn lazy_parse_and_decide(
    policies: &PolicySet,
    body: &[u8],
    guarded: bool,
    now: Timestamp,
) -> Decision {
    let envelope = parse_lazily(body).expect("a review the one-pass reading reads");
    if !guarded {
        let request = envelope.without_objects();
        return decide_facts(policies, &RequestFacts::new(&request), now);
    }
    let review = envelope.read_heads().expect("readable heads");
    let decision = decide_facts(policies, &RequestFacts::of_lazy(&review), now);
    assert!(!review.fell_back());
    decision
}

fn decide_facts(policies: &PolicySet, facts: &RequestFacts<'_>, now: Timestamp) -> Decision {
    let input = DecisionInput {
        request: facts,
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

    let read = |path: &str| std::fs::read(path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let (small_edit, pod) = (read(SMALL_EDIT), read(POD));
    // Both readings decide every review alike, and the lazy one reads the 30 KB Flux apply
    // without building either object.
    for (name, body, guarded, rule) in [
        ("deploy30k", &body, true, "Controller"),
        ("small_edit", &small_edit, true, "NotPermitted"),
        ("pod", &pod, false, "OutOfScope"),
    ] {
        let two_step = decide_at(&policies, &parse_review(body).unwrap(), now);
        let lazy = lazy_parse_and_decide(&policies, body, guarded, now);
        assert_eq!(
            two_step.record.rule.as_str(),
            rule,
            "{name}: {}",
            two_step.message
        );
        assert_eq!(
            (
                lazy.record.rule,
                lazy.allowed,
                &lazy.message,
                &lazy.record.changed_fields
            ),
            (
                two_step.record.rule,
                two_step.allowed,
                &two_step.message,
                &two_step.record.changed_fields
            ),
            "{name}"
        );
    }
    let flux_review = parse_lazily(&body).unwrap().read_heads().unwrap();
    decide_facts(&policies, &RequestFacts::of_lazy(&flux_review), now);
    assert!(
        !flux_review.any_read_whole(),
        "the Flux apply was read whole"
    );

    for (name, body, guarded) in [
        ("deploy30k", &body, true),
        ("small_edit", &small_edit, true),
        ("pod", &pod, false),
    ] {
        let mut group = c.benchmark_group(format!("parse_and_decide/{name}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("two_step", |b| {
            b.iter(|| {
                let request = parse_review(black_box(body)).unwrap();
                decide_at(black_box(&policies), &request, black_box(now))
            })
        });
        group.bench_function("lazy", |b| {
            b.iter(|| {
                lazy_parse_and_decide(
                    black_box(&policies),
                    black_box(body),
                    guarded,
                    black_box(now),
                )
            })
        });
        group.finish();
    }

    let mut parse = c.benchmark_group("parse");
    parse.throughput(Throughput::Bytes(body.len() as u64));
    parse.bench_function("parse_review", |b| {
        b.iter(|| parse_review(black_box(&body)).unwrap())
    });
    parse.bench_function("lazy_heads", |b| {
        b.iter(|| {
            parse_lazily(black_box(&body))
                .unwrap()
                .read_heads()
                .map(|review| review.object().is_some())
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

/// Runs one case `iterations` times, with no measurement of its own: `setup` runs none, so that
/// a count minus setup's is the cases' alone.
fn count(spec: &str) {
    let (case, iterations) = spec
        .split_once(':')
        .and_then(|(case, n)| Some((case, n.parse::<usize>().ok()?)))
        .unwrap_or_else(|| {
            panic!("DECIDE_COUNT={spec}: expected <case>:<iterations>, such as deploy30k:500")
        });
    let policies = PolicySet::load(Path::new(POLICY))
        .unwrap_or_else(|errors| panic!("{POLICY} does not load:\n{errors}"));
    let now: Timestamp = NOW.parse().unwrap();
    let read = |path: &str| std::fs::read(path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let (deploy, small_edit, pod) = (read(FIXTURE), read(SMALL_EDIT), read(POD));
    let request = parse_review(&deploy).unwrap_or_else(|error| panic!("{FIXTURE}: {error}"));
    let edited = human_edit(&request);
    let lazy = |body: &[u8], guarded: bool| {
        black_box(lazy_parse_and_decide(
            &policies,
            black_box(body),
            guarded,
            now,
        ));
    };
    let run: Box<dyn Fn()> = match case {
        "setup" => Box::new(|| {}),
        "deploy30k" => Box::new(|| lazy(&deploy, true)),
        "small_edit" => Box::new(|| lazy(&small_edit, true)),
        "pod" => Box::new(|| lazy(&pod, false)),
        "lazy_heads" => Box::new(|| {
            black_box(
                parse_lazily(black_box(&deploy))
                    .unwrap()
                    .read_heads()
                    .map(|review| review.object().is_some()),
            );
        }),
        "decide" => Box::new(|| {
            black_box(decide_at(&policies, black_box(&request), now));
        }),
        "decide_human_edit" => Box::new(|| {
            black_box(decide_at(&policies, black_box(&edited), now));
        }),
        other => panic!(
            "DECIDE_COUNT: no case {other:?}; the cases are setup, deploy30k, small_edit, pod, lazy_heads, decide and decide_human_edit"
        ),
    };
    for _ in 0..iterations {
        run();
    }
}

criterion_group!(decide_benches, benches);

fn main() {
    match std::env::var("DECIDE_COUNT") {
        Ok(spec) => count(&spec),
        // What criterion_main! does.
        Err(_) => {
            decide_benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
