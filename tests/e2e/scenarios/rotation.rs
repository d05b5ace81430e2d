//! Issue 11: runtime certificates. Two replicas keep their CA and serving certificate in one
//! Secret and write the caBundle themselves; with a 40s validity they rotate every ~15s, while a
//! client sends reviews through the API server the whole time: every single one must get
//! driftgate's answer (a denial), none a failed webhook call.
//!
//! They run as driftgate's identity with the chart's RBAC (the harness applies it): the Secret is
//! the one the chart's Role names, for release `driftgate` in namespace `driftgate`. The
//! configuration and the Lease are the test's own (the blast-radius test, running at the same
//! time, has the chart's), granted to driftgate alike: only the Lease's holder writes caBundle.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio_rustls::TlsConnector;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::json;

use crate::harness::{
    ADMIN, BOB, DRIFTGATE, Driftgate, control_plane, install_crypto_provider, repo_path,
    webhook_configuration,
};

const NS: &str = "rotation-e2e";
/// The chart's release namespace in the harness, which the test's webhooks do not select:
/// driftgate's own writes of its Secret are never sent to driftgate.
const SECRET_NS: &str = "driftgate";
/// `<release>-certs`: the name the chart's RBAC allows.
const SECRET: &str = "driftgate-certs";
const CONFIGURATION: &str = "driftgate-e2e-rotation";
const LEASE: &str = "driftgate-e2e-rotation-leader";

/// The chart's grants for its own configuration and Lease, for the test's names.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftgate-e2e-rotation}
rules:
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingwebhookconfigurations]
    resourceNames: [driftgate-e2e-rotation]
    verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftgate-e2e-rotation}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftgate-e2e-rotation}
subjects:
  - {kind: ServiceAccount, name: driftgate, namespace: driftgate}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: driftgate-e2e-rotation, namespace: driftgate}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [driftgate-e2e-rotation-leader]
    verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: driftgate-e2e-rotation, namespace: driftgate}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftgate-e2e-rotation}
subjects:
  - {kind: ServiceAccount, name: driftgate, namespace: driftgate}
"#;
const WEBHOOK_A: &str = "gate.driftgate.dev";
const WEBHOOK_B: &str = "gate-b.driftgate.dev";
const ROTATIONS: usize = 2;

fn policy() -> std::path::PathBuf {
    let template = std::fs::read_to_string(repo_path("tests/e2e/ledger-policy.yaml"))
        .expect("the policy template reads");
    let text = template
        .replace("__NAMESPACE__", NS)
        .replace("__NAME__", NS)
        .replace("    # __BREAK_GLASS_EXTRA__\n", "");
    let path = control_plane().dir().join(format!("{NS}-policy.yaml"));
    std::fs::write(&path, text).expect("the policy is written");
    path
}

/// The serial of the serving certificate the Secret holds now.
async fn stored_serial(secrets: &Api<Secret>) -> Option<String> {
    let secret = secrets
        .get_opt(SECRET)
        .await
        .expect("the admin reads Secrets")?;
    let data: BTreeMap<String, Vec<u8>> = secret.data?.into_iter().map(|(k, v)| (k, v.0)).collect();
    driftgate::certs::rotation::from_data(&data)
        .ok()
        .map(|stored| stored.current.serial)
}

/// The CA certificates (DER) of the configuration's first webhook's live caBundle.
async fn live_bundle(configurations: &Api<ValidatingWebhookConfiguration>) -> Vec<Vec<u8>> {
    let live = configurations
        .get(CONFIGURATION)
        .await
        .expect("the configuration reads");
    let bundle = live.webhooks.unwrap_or_default()[0]
        .client_config
        .ca_bundle
        .clone()
        .map(|b| b.0)
        .unwrap_or_default();
    CertificateDer::pem_slice_iter(&bundle)
        .map(|c| c.expect("the caBundle is PEM").to_vec())
        .collect()
}

/// A fresh TLS handshake with `addr`, trusting exactly `bundle` for 127.0.0.1, as the API server
/// does on a new connection: the serial of the certificate served, or why it was not trusted.
async fn handshake(addr: SocketAddr, bundle: &[Vec<u8>]) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in bundle {
        roots.add(ca.clone().into()).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let leaf = tls.get_ref().1.peer_certificates().expect("a certificate")[0].clone();
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).map_err(|e| e.to_string())?;
    Ok(cert.raw_serial_as_string())
}

/// New connections, one after another until `stop`: each must verify against the bundle live
/// just before it. Returns how many handshakes were made and the serials served.
fn spawn_handshakes(
    configurations: Api<ValidatingWebhookConfiguration>,
    replicas: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    serials: Arc<std::sync::Mutex<BTreeSet<String>>>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut made = 0;
        while !stop.load(Ordering::Relaxed) {
            let bundle = live_bundle(&configurations).await;
            for addr in &replicas {
                match handshake(*addr, &bundle).await {
                    Ok(serial) => {
                        serials.lock().unwrap().insert(serial);
                    }
                    Err(error) => panic!(
                        "handshake {made} with {addr} failed against the live caBundle ({} CAs): {error}",
                        bundle.len()
                    ),
                }
                made += 1;
            }
        }
        made
    })
}

#[tokio::test]
async fn certificates_rotate_twice_under_load_with_no_failed_review() {
    install_crypto_provider();
    let control_plane = control_plane();
    control_plane.kubectl(ADMIN, &["create", "namespace", NS]);
    control_plane.apply(ADMIN, RBAC);
    control_plane
        .kubectl(
            ADMIN,
            &[
                "label",
                "namespace",
                NS,
                "driftgate-e2e-rotation=guarded",
                "--overwrite",
            ],
        )
        .ok();
    let policy = policy();
    let runtime_args = [
        "--tls-secret",
        &format!("{SECRET_NS}/{SECRET}"),
        "--tls-secret-host",
        "127.0.0.1",
        "--cert-validity",
        "40s",
        "--cert-renew-before",
        "25s",
        "--ca-bundle-settle",
        "3s",
        "--cert-check-interval",
        "1s",
        "--webhook-configuration",
        CONFIGURATION,
        "--ca-bundle-webhook",
        WEBHOOK_A,
        "--ca-bundle-webhook",
        WEBHOOK_B,
        "--leader-lease",
        LEASE,
        "--leader-lease-namespace",
        SECRET_NS,
    ];
    let a = Driftgate::start_with_runtime_certs("rotation-a", &policy, DRIFTGATE, &runtime_args);
    let b = Driftgate::start_with_runtime_certs("rotation-b", &policy, DRIFTGATE, &runtime_args);

    // The chart's gate webhook, once per replica, with no caBundle: driftgate writes it.
    let mut configuration = webhook_configuration(CONFIGURATION, &a.webhook_url(), b"");
    let webhooks = configuration["webhooks"].as_array_mut().expect("webhooks");
    webhooks[0]["namespaceSelector"] =
        json!({"matchLabels": {"driftgate-e2e-rotation": "guarded"}});
    assert!(
        webhooks[0]["clientConfig"].get("caBundle").is_none(),
        "rendered with a caBundle"
    );
    let mut second = webhooks[0].clone();
    second["name"] = json!(WEBHOOK_B);
    second["clientConfig"]["url"] = json!(b.webhook_url());
    webhooks.push(second);
    a.register_probing(configuration, NS);

    let admin = control_plane.client(ADMIN).await;
    let live: ValidatingWebhookConfiguration = Api::all(admin.clone())
        .get(CONFIGURATION)
        .await
        .expect("the configuration reads");
    for webhook in live.webhooks.unwrap_or_default() {
        let bundle = webhook
            .client_config
            .ca_bundle
            .expect("driftgate wrote the caBundle");
        assert!(
            String::from_utf8_lossy(&bundle.0).contains("BEGIN CERTIFICATE"),
            "{}: caBundle is not PEM",
            webhook.name
        );
    }

    let secrets: Api<Secret> = Api::namespaced(admin.clone(), SECRET_NS);
    // The API server keeps its connections alive, so the reviews below seldom make a new
    // handshake; these do, continuously, which is when an untrusted certificate would show.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let handshakes = spawn_handshakes(
        Api::all(admin),
        vec![a.webhook_addr(), b.webhook_addr()],
        stop.clone(),
        served.clone(),
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(control_plane.client(BOB).await, NS);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let reviews_before = (a.reviews(), b.reviews());
    let mut serials = vec![
        stored_serial(&secrets)
            .await
            .expect("the Secret holds a certificate"),
    ];
    let started = Instant::now();
    let deadline = started + Duration::from_secs(150);
    let mut sent = 0usize;
    let mut last_check = Instant::now();
    while serials.len() <= ROTATIONS {
        assert!(
            Instant::now() < deadline,
            "only {} rotations after {sent} reviews; driftgate a's log:\n{}",
            serials.len() - 1,
            a.log_tail(40)
        );
        let object = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("probe-{sent}")),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        sent += 1;
        match configmaps.create(&dry_run, &object).await {
            Ok(_) => panic!("review {sent}: bob's ConfigMap was admitted in guarded {NS}"),
            Err(kube::Error::Api(status)) => {
                let denied = [WEBHOOK_A, WEBHOOK_B].iter().any(|w| {
                    status
                        .message
                        .starts_with(&format!("admission webhook \"{w}\" denied the request: "))
                });
                assert!(
                    denied,
                    "review {sent} after {:?} did not get driftgate's answer: {}",
                    started.elapsed(),
                    status.message
                );
            }
            Err(other) => panic!("review {sent}: {other}"),
        }
        if last_check.elapsed() >= Duration::from_millis(500) {
            last_check = Instant::now();
            if let Some(serial) = stored_serial(&secrets).await
                && serials.last() != Some(&serial)
            {
                eprintln!(
                    "rotation after {:?}, {sent} reviews: serial {serial}",
                    started.elapsed()
                );
                serials.push(serial);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last certificate stored is served once the replicas notice it (within
    // --cert-check-interval, later on a loaded machine): handshakes go on until it is.
    let settled = Instant::now();
    while !serials
        .iter()
        .all(|serial| served.lock().unwrap().contains(serial))
        && settled.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let made = handshakes.await.expect("every handshake verified");
    let served = served.lock().unwrap().clone();
    eprintln!(
        "{made} fresh handshakes verified against the live caBundle; {} serials served",
        served.len()
    );
    for serial in &serials {
        assert!(
            served.contains(serial),
            "serial {serial} of the Secret was never served: {served:?}"
        );
    }
    // Both replicas answered every review (each goes to both webhooks): no call failed there
    // either, and both switched to each new certificate.
    let answered = (
        a.reviews() - reviews_before.0,
        b.reviews() - reviews_before.1,
    );
    eprintln!(
        "{sent} reviews in {:?} across {} rotations; answered by a: {}, b: {}",
        started.elapsed(),
        serials.len() - 1,
        answered.0,
        answered.1
    );
    assert!(
        answered.0 >= sent as f64 && answered.1 >= sent as f64,
        "{answered:?} of {sent}"
    );
    // One Lease holder wrote every caBundle; the other replica only read and served.
    let leaders: Vec<f64> = [&a, &b]
        .iter()
        .map(|r| r.counter("driftgate_leader", &[]))
        .collect();
    let writes: Vec<f64> = [&a, &b]
        .iter()
        .map(|r| r.counter("driftgate_ca_bundle_writes_total", &["result=\"success\""]))
        .collect();
    eprintln!("leader gauges {leaders:?}, caBundle writes {writes:?}");
    assert_eq!(leaders.iter().sum::<f64>(), 1.0, "{leaders:?}");
    let follower = usize::from(leaders[0] == 1.0);
    assert_eq!(
        writes[follower], 0.0,
        "the replica that never led wrote caBundle: {writes:?}"
    );
    // The first bundle, then the new CA added for each rotation (the old leaves later).
    assert!(writes[1 - follower] >= 1.0 + ROTATIONS as f64, "{writes:?}");
    for replica in [&a, &b] {
        assert!(
            replica.counter("driftgate_certificate_rotations_total", &[]) >= ROTATIONS as f64,
            "a replica did not switch certificates:\n{}",
            replica.log_tail(40)
        );
        assert_eq!(
            replica.counter("driftgate_ca_bundle_writes_total", &["result=\"failure\""]),
            0.0
        );
        let log = replica.log_tail(2000);
        for trouble in [
            "watching the certificate Secret failed",
            "cannot write Secret",
            "replacing the certificate Secret",
        ] {
            assert!(!log.contains(trouble), "{trouble}:\n{log}");
        }
    }
}
