//! Issue 24, authenticating the caller: the e2e API server presents a client certificate to
//! webhooks (its `--admission-control-config-file` names a kubeconfig whose `*` entry holds a
//! certificate with CN `kube-apiserver` from the harness's webhook client CA), as the chart
//! README's "Authenticating the API server" configures one. A driftgate given that CA
//! (`--client-ca-file`) judges the API server's reviews, and every other caller fails the TLS
//! handshake: no certificate, a certificate of the cluster's own CA, or one of the right CA with
//! another name. The shared driftgate runs the same way; the driftgates tests start themselves
//! run without (the chart's default), and the API server's calls to them work as before.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::harness::pki::Pair;
use crate::harness::{
    ADMIN, BOB, Driftgate, FLUX, control_plane, install_crypto_provider, repo_path, shared,
    webhook_configuration,
};

const NS: &str = "client-auth-e2e";
/// The driftgate without a client CA's namespace.
const NS_OFF: &str = "client-auth-off-e2e";

/// A policy guarding only `namespace` (which the example policy, the shared driftgate's, does
/// not), written into the scratch directory.
fn policy_for(namespace: &str) -> std::path::PathBuf {
    let control_plane = control_plane();
    control_plane
        .kubectl(ADMIN, &["create", "namespace", namespace])
        .ok();
    let path = control_plane.dir().join(format!("{namespace}-policy.yaml"));
    let policy = format!(
        r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {{name: {namespace}}}
spec:
  mode: Enforce
  namespaces: {{include: ["{namespace}"]}}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
"#
    );
    std::fs::write(&path, policy).unwrap();
    path
}

/// A TLS client of the webhook port trusting driftgate's serving CA, presenting `identity`.
fn client(driftgate: &Driftgate, identity: Option<&Pair>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(driftgate.ca_pem()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
    let mut config = match identity {
        Some(pair) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(pair.cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// bob's `kubectl edit` review as a raw HTTP/1.1 POST.
fn review_post() -> Vec<u8> {
    let body = std::fs::read(repo_path("tests/fixtures/kubectl-edit.json")).unwrap();
    let mut post = format!(
        "POST /validate HTTP/1.1\r\nHost: driftgate\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    post.extend(body);
    post
}

/// A new connection from `connector`, POSTing a review: the status line of driftgate's answer.
async fn answer(driftgate: &Driftgate, connector: &TlsConnector) -> String {
    use tokio::io::AsyncWriteExt;
    let tcp = TcpStream::connect(driftgate.webhook_addr()).await.unwrap();
    let name = ServerName::IpAddress(driftgate.webhook_addr().ip().into());
    let mut stream = connector.connect(name, tcp).await.unwrap();
    stream.write_all(&review_post()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

/// A new connection from `connector` that driftgate refuses: the TLS alert it sends. A TLS 1.3
/// client's handshake is done once it has sent its certificate, and the server's verdict on it
/// comes next, so it is read before the POST; the POST then fails on the dead connection.
async fn refusal(driftgate: &Driftgate, connector: &TlsConnector) -> String {
    use tokio::io::AsyncWriteExt;
    let tcp = TcpStream::connect(driftgate.webhook_addr()).await.unwrap();
    let name = ServerName::IpAddress(driftgate.webhook_addr().ip().into());
    let mut stream = match connector.connect(name, tcp).await {
        Ok(stream) => stream,
        Err(error) => return alert_of(&error),
    };
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte));
    let alert = match read.await.expect("driftgate refuses within 10 s") {
        Err(error) => alert_of(&error),
        Ok(n) => panic!("driftgate sent {n} bytes instead of refusing"),
    };
    let post = stream.write_all(&review_post()).await;
    assert!(
        post.is_err(),
        "a POST on the refused connection was written"
    );
    alert
}

fn alert_of(error: &std::io::Error) -> String {
    match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(alert)) => format!("{alert:?}"),
        _ => format!("not an alert: {error}"),
    }
}

#[test]
fn with_a_client_ca_only_the_api_servers_reviews_are_read_and_other_callers_fail_the_handshake() {
    install_crypto_provider();
    let control_plane = control_plane();
    let policy = policy_for(NS);
    let client_ca = control_plane.webhook_client_ca_file();
    let driftgate = Driftgate::start(
        "client-auth",
        &policy,
        &["--client-ca-file", &client_ca.display().to_string()],
    );
    let mut configuration = webhook_configuration(
        "driftgate-e2e-client-auth",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": NS}});
    // Registration waits until a probe's review is counted: the API server's handshake passed.
    driftgate.register_probing(configuration, NS);
    assert_eq!(
        driftgate.counter("driftgate_webhook_client_auth", &[]),
        1.0,
        "{}",
        driftgate.metrics()
    );

    // The API server's reviews are judged: Flux's apply admitted, bob's create refused with
    // driftgate's sentence.
    let configmap = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {NS}}}\n\
         data: {{mode: fast}}\n"
    );
    control_plane
        .kubectl_with_stdin(
            FLUX,
            &[
                "apply",
                "--server-side",
                "--field-manager=kustomize-controller",
                "-f",
                "-",
            ],
            Some(&configmap),
        )
        .ok();
    let refused = control_plane
        .kubectl(BOB, &["create", "configmap", "bobs", "-n", NS])
        .failed();
    assert!(
        refused
            .stderr
            .contains(&format!("bob may not create ConfigMap {NS}/bobs")),
        "{}",
        refused.stderr
    );
    let refusals = "driftgate_webhook_client_certificates_refused_total";
    assert_eq!(
        driftgate.counter(refusals, &[]),
        0.0,
        "the API server was refused:\n{}",
        driftgate.log_tail(20)
    );

    // Everyone else fails the handshake, and no review of theirs is read.
    let reviews = driftgate.reviews();
    let pki = control_plane;
    let stranger_cases: [(&str, Option<Pair>, &str, &str); 3] = [
        ("no certificate", None, "CertificateRequired", "missing"),
        (
            "the API server's name from the cluster's CA (which signs every user's certificate)",
            Some(pki.ca().client("kube-apiserver", &[])),
            "UnknownCA",
            "untrusted",
        ),
        (
            "another name from the webhook client CA",
            Some(pki.webhook_client_ca().client("bob", &[])),
            "AccessDenied",
            "name",
        ),
    ];
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    for (who, identity, alert, reason) in stranger_cases {
        let connector = client(&driftgate, identity.as_ref());
        let outcome = runtime.block_on(refusal(&driftgate, &connector));
        assert_eq!(outcome, alert, "{who}");
        let label = format!("reason=\"{reason}\"");
        assert_eq!(driftgate.counter(refusals, &[&label]), 1.0, "{who}");
    }
    assert_eq!(driftgate.reviews(), reviews, "a stranger's review was read");
    let log = driftgate.log_tail(200);
    assert!(
        log.contains("presented=\"CN=bob\"") && log.contains("caller_authenticated=true"),
        "{log}"
    );

    // The same client with the API server's certificate is answered: the refusals above were
    // about the caller, not the client.
    let api_server = pki.webhook_client_ca().client("kube-apiserver", &[]);
    let connector = client(&driftgate, Some(&api_server));
    let answered = runtime.block_on(answer(&driftgate, &connector));
    assert_eq!(answered, "HTTP/1.1 200 OK");
}

#[test]
fn the_shared_driftgate_requires_the_api_servers_certificate_and_one_without_still_answers() {
    install_crypto_provider();
    let control_plane = control_plane();
    // Every scenario through the shared driftgate comes through a verified handshake.
    let shared = shared();
    assert_eq!(shared.counter("driftgate_webhook_client_auth", &[]), 1.0);
    let before = shared.reviews();
    control_plane
        .kubectl(
            ADMIN,
            &[
                "create",
                "configmap",
                "client-auth-probe",
                "-n",
                "default",
                "--dry-run=server",
            ],
        )
        .ok();
    assert!(
        shared.reviews() > before,
        "the shared driftgate was not called"
    );

    // A driftgate without a client CA (the chart's default) is called as before: the API server
    // sends its certificate only when asked for one.
    let plain = Driftgate::start("client-auth-off", &policy_for(NS_OFF), &[]);
    assert_eq!(plain.counter("driftgate_webhook_client_auth", &[]), 0.0);
    let mut configuration = webhook_configuration(
        "driftgate-e2e-client-auth-off",
        &plain.webhook_url(),
        plain.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": NS_OFF}});
    plain.register_probing(configuration, NS_OFF);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let anyone = runtime.block_on(answer(&plain, &client(&plain, None)));
    assert_eq!(anyone, "HTTP/1.1 200 OK");
}
