//! The chart installed with helm on the node, as users run it (issue 25, section 2): the kind
//! quickstart's commands with only the image reference, the policy and two replicas set; the
//! quickstart's scenarios against it; `helm test`; a rolling `helm upgrade` while Flux writes and
//! bob is refused, both counted; the leader's pod deleted and the other replica taking over; and
//! `helm uninstall` leaving the cluster writable.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::KubectlOutput;
use crate::harness::chart::helm;
use crate::harness::control_plane::{ADMIN, ALICE, BOB, ControlPlane, FLUX, bare_control_plane};
use crate::harness::node::{HELM_TEST_IMAGE, Node, node};
use crate::harness::repo_path;

const RELEASE: &str = "driftgate";
const RELEASE_NS: &str = "driftgate-system";
/// The quickstart's namespace, which the example policy's `production` guards.
const NS: &str = "payments";
const AS_FLUX: &str = "--as=system:serviceaccount:flux-system:kustomize-controller";

struct Helm<'a> {
    plane: &'a ControlPlane,
    home: std::path::PathBuf,
}

impl Helm<'_> {
    /// `helm ARGS` as the cluster's admin; panics unless it succeeds.
    #[track_caller]
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(helm())
            .args(args)
            .arg("--kubeconfig")
            .arg(self.plane.kubeconfig(ADMIN))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .expect("helm runs");
        assert!(
            out.status.success(),
            "helm {} failed:\n{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn kubectl(plane: &ControlPlane, args: &[&str]) -> KubectlOutput {
    plane.kubectl(ADMIN, args)
}

fn json(plane: &ControlPlane, args: &[&str]) -> Value {
    let out = kubectl(plane, &[args, &["-o", "json"]].concat()).ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

/// Polls `check` every 500 ms until it returns Some, for at most `timeout`.
#[track_caller]
fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The driftgate pods of the release: (name, ready).
fn replicas(plane: &ControlPlane) -> Vec<(String, bool)> {
    json(
        plane,
        &[
            "get",
            "pods",
            "-n",
            RELEASE_NS,
            "-l",
            "app.kubernetes.io/name=driftgate",
        ],
    )["items"]
        .as_array()
        .expect("a pod list")
        .iter()
        // The Deployment's pods (not the helm test's), not being deleted.
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        })
        .map(|p| {
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                ready,
            )
        })
        .collect()
}

fn leader(plane: &ControlPlane) -> Option<String> {
    let lease = kubectl(
        plane,
        &[
            "get",
            "lease",
            "-n",
            RELEASE_NS,
            "driftgate-leader",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    (lease.success() && !lease.stdout.is_empty()).then_some(lease.stdout)
}

/// Whether the gate webhook is armed: its namespaceSelector no longer has the chart's unarmed
/// expression (`kubernetes.io/metadata.name DoesNotExist`, which matches no namespace).
fn gate_armed(plane: &ControlPlane) -> bool {
    armed(&json(
        plane,
        &["get", "validatingwebhookconfiguration", RELEASE],
    ))
}

fn armed(configuration: &Value) -> bool {
    let gate = configuration["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|w| w["name"] == "gate.driftgate.dev")
        .expect("the gate webhook")
        .clone();
    !gate["namespaceSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["operator"] == "DoesNotExist")
}

/// Every version of the gate's webhook configuration written while a `helm upgrade` runs, from
/// a `kubectl get --watch` started before it: how many were unarmed (the chart's unarmed
/// expression, which matches no namespace, so that no write is sent to driftgate) is what
/// [`GateWatch::finish`] reports.
struct GateWatch {
    watch: std::process::Child,
    out: std::path::PathBuf,
}

impl GateWatch {
    fn start(plane: &ControlPlane, dir: &Path, name: &str) -> GateWatch {
        let out = dir.join(format!("gate-watch-{name}.json"));
        let file = std::fs::File::create(&out).expect("the watch's output file");
        let watch = Command::new(crate::harness::testenv::binaries().kubectl())
            .arg("--kubeconfig")
            .arg(plane.kubeconfig(ADMIN))
            .args([
                "get",
                "validatingwebhookconfiguration",
                RELEASE,
                "--watch",
                "-o",
                "json",
            ])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl get --watch starts");
        // The watch has listed the current version before the upgrade starts.
        eventually(
            "the gate watch's first version",
            Duration::from_secs(30),
            || (std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) > 0).then_some(()),
        );
        GateWatch { watch, out }
    }

    /// Waits until the gate is armed again, stops the watch, prints what it saw, and returns
    /// how many unarmed versions were written.
    fn finish(mut self, plane: &ControlPlane, upgrade: &str) -> usize {
        eventually(
            &format!("the gate armed again after {upgrade}"),
            Duration::from_secs(30),
            || gate_armed(plane).then_some(()),
        );
        std::thread::sleep(Duration::from_millis(500));
        let _ = self.watch.kill();
        let _ = self.watch.wait();
        let text = std::fs::read_to_string(&self.out).expect("the watch's output");
        let versions: Vec<Value> = serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .collect();
        // Only the chart renders the unarmed expression (the leader never writes it): each
        // unarmed version is helm's apply.
        let unarmed = versions.iter().filter(|v| !armed(v)).count();
        eprintln!(
            "driftgate e2e: during {upgrade} the gate's configuration was written {} times, {unarmed} of them unarmed",
            versions.len().saturating_sub(1)
        );
        unarmed
    }
}

/// The quickstart's `api.yaml` ("Git"), with the image `image`.
fn api_yaml(dir: &Path, image: &str) -> String {
    let path = dir.join("api.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  namespace: {NS}\n  \
             labels: {{app: api}}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: api}}\n  \
             template:\n    metadata:\n      labels: {{app: api}}\n    spec:\n      containers:\n      \
             - name: pause\n        image: {image}\n"
        ),
    )
    .expect("api.yaml is written");
    path.to_str().expect("a UTF-8 path").to_owned()
}

fn flux_applies(plane: &ControlPlane, file: &str) -> KubectlOutput {
    kubectl(
        plane,
        &[
            AS_FLUX,
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "--force-conflicts",
            "-f",
            file,
        ],
    )
}

fn record_phases(plane: &ControlPlane) -> Vec<String> {
    json(plane, &["get", "backportrequirements", "-n", NS])["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| r["status"]["phase"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[track_caller]
fn assert_refused(out: &KubectlOutput, contains: &str) {
    assert!(
        !out.success()
            && out
                .stderr
                .contains("admission webhook \"gate.driftgate.dev\" denied the request")
            && out.stderr.contains(contains),
        "{} {} was not refused by driftgate with {contains:?}:\n{}",
        out.program,
        out.args.join(" "),
        out.stderr
    );
}

/// The quickstart's steps 5 to 8, as written in docs/quickstart-kind.md, against the install.
fn quickstart(plane: &ControlPlane, dir: &Path) {
    // Step 5: Flux deploys an app (pause:3.10 is not on the node: its pod never starts, and its
    // pull goes nowhere, as containerd's registries are a closed loopback port).
    let api = api_yaml(dir, "registry.k8s.io/pause:3.10");
    flux_applies(plane, &api).ok();
    // Step 6: bob, and the admin, are refused.
    let set_image = [
        "-n",
        NS,
        "set",
        "image",
        "deployment/api",
        "pause=registry.k8s.io/pause:3.9",
    ];
    assert_refused(
        &kubectl(plane, &[&set_image[..], &["--as=bob"]].concat()),
        "bob may not update Deployment payments/api: only its controllers (flux, kubernetes) write here",
    );
    assert_refused(
        &kubectl(
            plane,
            &["-n", NS, "scale", "deployment", "api", "--replicas=2"],
        ),
        "admin may not",
    );
    // Step 7: alice opens a window and fixes the image; Flux is held.
    let until = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(1))
        .expect("in range")
        .strftime("%Y%m%dT%H%MZ")
        .to_string();
    let open = format!(
        r#"{{"metadata":{{"labels":{{"driftgate.dev/break-glass":"{until}"}},"annotations":{{"driftgate.dev/break-glass-reason":"INC-1: trying driftgate on kind"}}}}}}"#
    );
    let as_alice = ["--as=alice", "--as-group=sre-oncall"];
    let patch = ["-n", NS, "patch", "deployment", "api"];
    kubectl(
        plane,
        &[&patch[..], &as_alice, &["--type=merge", "-p", &open]].concat(),
    )
    .ok();
    let fixed = kubectl(plane, &[&set_image[..], &as_alice].concat()).ok();
    assert!(
        fixed.stderr.contains(
            "Warning: driftgate: alice changed Deployment payments/api under the break-glass window"
        ),
        "{}",
        fixed.stderr
    );
    assert_refused(&flux_applies(plane, &api), "ControllerHeld");
    assert_eq!(record_phases(plane), ["Open"]);
    // Step 8: alice closes the window; Git gets the fix and Flux applies it.
    let close = r#"{"metadata":{"labels":{"driftgate.dev/break-glass":null},"annotations":{"driftgate.dev/break-glass-reason":null}}}"#;
    kubectl(
        plane,
        &[&patch[..], &as_alice, &["--type=merge", "-p", close]].concat(),
    )
    .ok();
    eventually(
        "the record to await its backport",
        Duration::from_secs(60),
        || (record_phases(plane) == ["AwaitingBackport"]).then_some(()),
    );
    let fixed_api = api_yaml(dir, "registry.k8s.io/pause:3.9");
    flux_applies(plane, &fixed_api).ok();
    eventually(
        "the record to be Backported",
        Duration::from_secs(60),
        || (record_phases(plane) == ["Backported"]).then_some(()),
    );
}

/// What a writer saw while it ran.
#[derive(Debug, Default)]
struct Tally {
    admitted: usize,
    refused: usize,
    /// The first few refusals' stderr (for Flux), or admissions' output (for bob).
    samples: Vec<String>,
}

/// bob's merge patch of the ConfigMap Flux writes during the roll: `data.bob` set to `value`.
fn bob_patches_rolling(plane: &ControlPlane, value: &str) -> KubectlOutput {
    let patch = serde_json::json!({"data": {"bob": value}}).to_string();
    plane.kubectl(
        BOB,
        &[
            "-n",
            NS,
            "patch",
            "configmap",
            "rolling",
            "--type=merge",
            "-p",
            &patch,
        ],
    )
}

/// Writes every 200 ms until `stop`: Flux applying a ConfigMap in `payments` (each time another
/// value), or bob patching it. Counts what was admitted and refused.
fn writer(stop: Arc<AtomicBool>, flux: bool) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let plane = bare_control_plane();
        let mut tally = Tally::default();
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            let out = if flux {
                plane.kubectl_with_stdin(
                    FLUX,
                    &[
                        "apply",
                        "--server-side",
                        "--field-manager=kustomize-controller",
                        "--force-conflicts",
                        "-f",
                        "-",
                    ],
                    Some(&format!(
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rolling\n  namespace: {NS}\ndata:\n  written: \"{i}\"\n"
                    )),
                )
            } else {
                bob_patches_rolling(plane, &i.to_string())
            };
            if out.success() {
                tally.admitted += 1;
                if !flux && tally.samples.len() < 5 {
                    tally.samples.push(format!("{}{}", out.stdout, out.stderr));
                }
            } else {
                tally.refused += 1;
                if flux && tally.samples.len() < 5 {
                    tally.samples.push(out.stderr.clone());
                }
                if !flux
                    && !out
                        .stderr
                        .contains("bob may not update ConfigMap payments/rolling")
                {
                    tally
                        .samples
                        .push(format!("refused otherwise: {}", out.stderr));
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        tally
    })
}

#[test]
fn the_chart_installed_with_helm_serves_rolls_fails_over_and_uninstalls_cleanly() {
    let node: &Node = node();
    let plane = bare_control_plane();
    let dir = node.dir().join("helm-e2e");
    std::fs::create_dir_all(&dir).expect("the test's directory is created");
    let helm = Helm {
        plane,
        home: dir.join("helm"),
    };
    let chart = repo_path("charts/driftgate");
    let chart = chart.to_str().expect("a UTF-8 path");
    let policy = repo_path("policies/example.yaml");

    // Step 3: what the demo needs before the gate is up.
    kubectl(plane, &["create", "namespace", NS]).ok();
    kubectl(
        plane,
        &[
            "create",
            "clusterrolebinding",
            "demo-flux",
            "--clusterrole=cluster-admin",
            "--serviceaccount=flux-system:kustomize-controller",
        ],
    )
    .ok();
    kubectl(
        plane,
        &[
            "-n",
            NS,
            "create",
            "rolebinding",
            "demo-edit",
            "--clusterrole=edit",
            "--user=bob",
            "--group=sre-oncall",
        ],
    )
    .ok();

    // Step 4: the install, as written, with two replicas said aloud.
    let started = Instant::now();
    let notes = helm.run(&[
        "install",
        RELEASE,
        chart,
        "--namespace",
        RELEASE_NS,
        "--create-namespace",
        "--set",
        "image.repository=driftgate",
        "--set",
        &format!("image.tag={}", env!("CARGO_PKG_VERSION")),
        "--set-file",
        &format!("policy={}", policy.display()),
        "--set",
        "replicaCount=2",
        "--wait",
        "--timeout",
        "5m",
    ]);
    eprintln!(
        "driftgate e2e: helm install --wait took {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(notes.contains("installed in Audit"), "{notes}");
    let installed = replicas(plane);
    assert_eq!(installed.len(), 2, "{installed:?}");
    assert!(installed.iter().all(|(_, ready)| *ready), "{installed:?}");

    // Audit: bob's write is admitted with driftgate's warning, once the leader has armed the
    // gate: the API server reached driftgate through the Service.
    let warned = eventually(
        "a driftgate audit warning on bob's write in payments",
        Duration::from_secs(90),
        || {
            let out = plane.kubectl(
                BOB,
                &[
                    "-n",
                    NS,
                    "create",
                    "configmap",
                    "audited",
                    "--from-literal=a=b",
                    "--dry-run=server",
                ],
            );
            (out.success() && out.stderr.contains("driftgate audit (policy")).then_some(out.stderr)
        },
    );
    assert!(
        warned.contains("bob may not create ConfigMap payments/audited"),
        "{warned}"
    );

    // Enforce, as the quickstart does next.
    let watch = GateWatch::start(plane, &dir, "enforce");
    helm.run(&[
        "upgrade",
        RELEASE,
        chart,
        "-n",
        RELEASE_NS,
        "--reuse-values",
        "--set",
        "enforcement=Enforce",
        "--wait",
        "--timeout",
        "5m",
    ]);
    assert_eq!(
        watch.finish(plane, "helm upgrade --set enforcement=Enforce"),
        0,
        "the upgrade unarmed the gate the leader had armed"
    );
    eventually("bob refused under Enforce", Duration::from_secs(60), || {
        let out = plane.kubectl(
            BOB,
            &[
                "-n",
                NS,
                "create",
                "configmap",
                "enforced",
                "--from-literal=a=b",
                "--dry-run=server",
            ],
        );
        out.stderr
            .contains("admission webhook \"gate.driftgate.dev\" denied the request")
            .then_some(())
    });

    quickstart(plane, &dir);

    // Step 9: helm test, with an image the node has (sh and kubectl).
    let watch = GateWatch::start(plane, &dir, "helm-test");
    helm.run(&[
        "upgrade",
        RELEASE,
        chart,
        "-n",
        RELEASE_NS,
        "--reuse-values",
        "--set",
        &format!("helmTest.namespace={NS}"),
        "--set",
        &format!("helmTest.image={HELM_TEST_IMAGE}"),
        "--wait",
        "--timeout",
        "5m",
    ]);
    // The upgrade kept the armed gate (the chart's `lookup`): a `helm test` right after it is
    // reviewed (were the gate unarmed, its write would be admitted and the test fail).
    let tested = helm.run(&[
        "test",
        RELEASE,
        "-n",
        RELEASE_NS,
        "--logs",
        "--timeout",
        "3m",
    ]);
    assert_eq!(
        watch.finish(plane, "the helm test values' upgrade"),
        0,
        "the upgrade unarmed the gate the leader had armed"
    );
    assert!(
        tested.contains("PASS: driftgate denied the write"),
        "{tested}"
    );

    // A rolling upgrade (a new pod template) while Flux keeps writing and bob keeps trying:
    // the writers start before `helm upgrade` and stop once the new replicas serve. helm's
    // apply keeps the gate the leader armed (the chart's `lookup`), the watch counts any
    // unarmed version it writes.
    flux_applies_rolling_first(plane);
    let before: Vec<String> = replicas(plane).into_iter().map(|(name, _)| name).collect();
    let watch = GateWatch::start(plane, &dir, "roll");
    let stop = Arc::new(AtomicBool::new(false));
    let flux = writer(stop.clone(), true);
    let bob = writer(stop.clone(), false);
    std::thread::sleep(Duration::from_secs(2));
    helm.run(&[
        "upgrade",
        RELEASE,
        chart,
        "-n",
        RELEASE_NS,
        "--reuse-values",
        "--set-string",
        "podAnnotations.driftgate-e2e/roll=1",
    ]);
    let old_left_at_start = replicas(plane)
        .iter()
        .filter(|(name, _)| before.contains(name))
        .count();
    let mut least_healthy = i64::MAX;
    let rolled = std::thread::spawn(|| {
        bare_control_plane().kubectl(
            ADMIN,
            &[
                "-n",
                RELEASE_NS,
                "rollout",
                "status",
                "deployment/driftgate",
                "--timeout=5m",
            ],
        )
    });
    // The PDB's view while it rolls: never fewer than one healthy replica.
    while !rolled.is_finished() {
        let pdb = json(plane, &["get", "pdb", "-n", RELEASE_NS, "driftgate"]);
        if let Some(healthy) = pdb["status"]["currentHealthy"].as_i64() {
            least_healthy = least_healthy.min(healthy);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let rolled = rolled.join().expect("the rollout status thread");
    assert!(
        rolled.success(),
        "the rolling upgrade did not complete:\n{}",
        rolled.stderr
    );
    eventually("the old replicas gone", Duration::from_secs(60), || {
        (replicas(plane).len() == 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let unarmed_versions = watch.finish(plane, "the rolling upgrade");
    let flux = flux.join().expect("the Flux writer");
    let bob = bob.join().expect("bob's writer");
    let after: Vec<String> = replicas(plane).into_iter().map(|(name, _)| name).collect();
    eprintln!(
        "driftgate e2e: during the roll ({old_left_at_start} old replicas left when helm's apply returned; the gate written unarmed {} times) Flux wrote {} times ({} refused), bob tried {} times ({} admitted); the PDB's currentHealthy was at least {least_healthy}",
        unarmed_versions,
        flux.admitted + flux.refused,
        flux.refused,
        bob.admitted + bob.refused,
        bob.admitted
    );
    assert!(
        old_left_at_start >= 1,
        "the roll was over when helm's apply returned: {before:?}"
    );
    assert_eq!(
        unarmed_versions, 0,
        "the upgrade unarmed the gate the leader had armed"
    );
    assert!(
        before.iter().all(|name| !after.contains(name)),
        "the upgrade did not replace the replicas: {before:?} then {after:?}"
    );
    assert_eq!(
        flux.refused, 0,
        "Flux's writes refused during the roll: {:?}",
        flux.samples
    );
    assert_eq!(
        bob.admitted, 0,
        "bob's writes admitted during the roll: {:?}",
        bob.samples
    );
    assert!(
        bob.samples.is_empty(),
        "bob refused by something else than driftgate's rule: {:?}",
        bob.samples
    );
    assert!(
        flux.admitted >= 5 && bob.refused >= 5,
        "too few writes to say anything: {flux:?} {bob:?}"
    );
    assert!(
        least_healthy >= 1,
        "the PDB saw {least_healthy} healthy replicas"
    );

    // The leader's pod deleted: the other replica takes the Lease over, and says so. The
    // deleted leader releases the Lease as it stops; the other replica watches the Lease and
    // campaigns the moment it is released, long before the Deployment's replacement starts.
    let old_leader = eventually(
        "one of the new replicas leading",
        Duration::from_secs(60),
        || leader(plane).filter(|holder| after.contains(holder)),
    );
    let other: Vec<String> = after
        .iter()
        .filter(|n| **n != old_leader)
        .cloned()
        .collect();
    assert_eq!(other.len(), 1, "leader {old_leader}, replicas {after:?}");
    let deleted = Instant::now();
    kubectl(
        plane,
        &[
            "delete",
            "pod",
            "-n",
            RELEASE_NS,
            &old_leader,
            "--wait=false",
        ],
    )
    .ok();
    let new_leader = eventually("a new leader", Duration::from_secs(60), || {
        leader(plane).filter(|holder| *holder != old_leader)
    });
    let took = deleted.elapsed();
    let running: Vec<String> = replicas(plane).into_iter().map(|(name, _)| name).collect();
    eprintln!(
        "driftgate e2e: {new_leader} ({}) leads {:.1}s after the leader {old_leader} was deleted",
        if new_leader == other[0] {
            "the other replica"
        } else {
            "the leader's replacement"
        },
        took.as_secs_f64()
    );
    assert!(
        running.contains(&new_leader),
        "{new_leader} leads but is not running: {running:?}"
    );
    assert_eq!(
        new_leader, other[0],
        "the leader's replacement took the Lease, not the replica that was running"
    );
    eventually(
        "the new leader's log saying it leads",
        Duration::from_secs(30),
        || {
            let log = kubectl(plane, &["logs", "-n", RELEASE_NS, &new_leader])
                .ok()
                .stdout;
            log.contains("leading: this replica writes the webhook configuration")
                .then_some(())
        },
    );
    assert_refused(
        &bob_patches_rolling(plane, "after"),
        "bob may not update ConfigMap payments/rolling",
    );

    // helm uninstall: the cluster is writable again, for everyone, everywhere.
    helm.run(&[
        "uninstall",
        RELEASE,
        "-n",
        RELEASE_NS,
        "--wait",
        "--timeout",
        "3m",
    ]);
    let configurations = kubectl(
        plane,
        &["get", "validatingwebhookconfigurations", "-o", "name"],
    )
    .ok();
    // The last helm test's Pod is a hook, not part of the release: it stays (chart README).
    kubectl(plane, &["get", "pod", "-n", RELEASE_NS, "driftgate-test"]).ok();
    assert!(
        !configurations.stdout.contains("driftgate"),
        "webhook configurations left: {}",
        configurations.stdout
    );
    let bob_after = bob_patches_rolling(plane, "uninstalled");
    assert!(
        bob_after.success() && !bob_after.stderr.contains("driftgate"),
        "bob's write after uninstall: {}",
        bob_after.stderr
    );
    plane
        .kubectl(
            ALICE,
            &["-n", NS, "scale", "deployment", "api", "--replicas=0"],
        )
        .ok();
    kubectl(plane, &["delete", "namespace", NS, "--timeout=120s"]).ok();
}

/// The ConfigMap the roll's writers write, created by Flux first.
fn flux_applies_rolling_first(plane: &ControlPlane) {
    plane.kubectl_with_stdin(
        FLUX,
        &["apply", "--server-side", "--field-manager=kustomize-controller", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rolling\n  namespace: {NS}\ndata:\n  written: \"0\"\n"
        )),
    )
    .ok();
}
