//! `driftgate serve` as a real process over real TLS on loopback: keep-alive reuse, policy
//! reload, SIGHUP, slow headers, and a SIGTERM drain that lets an in-flight review finish.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::webhook::{
    BIN, Options, Server, Stderr, admin_get, allowed, connect, fixture, free_port,
    install_crypto_provider, read_response, send_review, spawn_with, start, start_logging,
    start_with,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn keep_alive_connection_serves_many_reviews() {
    install_crypto_provider();
    let server = start("keepalive");
    let mut stream = connect(&server).await;
    for i in 0..50 {
        let name = if i % 2 == 0 {
            "kubectl-edit.json"
        } else {
            "flux-ssa-update.json"
        };
        let (status, body) = send_review(&mut stream, &fixture(name)).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(allowed(&body), i % 2 == 1);
    }
    let (_, metrics) = admin_get(server.admin, "/metrics").unwrap();
    assert!(
        metrics.contains("driftgate_admission_duration_seconds_count 50"),
        "{metrics}"
    );
}

#[tokio::test]
async fn policy_edits_reload_and_bad_ones_are_refused_while_serving() {
    install_crypto_provider();
    let server = start("reload");
    let policy = server.dir.join("policies/example.yaml");
    let mut stream = connect(&server).await;
    let edit = fixture("kubectl-edit.json");
    assert!(!allowed(&send_review(&mut stream, &edit).await.unwrap().1));

    // A ConfigMap mount replaces the file through a symlink swap; a rename is the same event.
    let swap = |text: String| {
        let tmp = server.dir.join("policies/.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &policy).unwrap();
    };
    swap("apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: broken}\nspec: {}\n".into());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = admin_get(server.admin, "/metrics").unwrap();
        if metrics.contains("driftgate_policy_reloads_total{result=\"failure\"} 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad policy was not noticed:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still the old policy, still ready.
    assert!(!allowed(&send_review(&mut stream, &edit).await.unwrap().1));
    assert_eq!(admin_get(server.admin, "/readyz").unwrap().0, 200);

    let relaxed = std::fs::read_to_string("policies/example.yaml")
        .unwrap()
        .replace("\"prod-*\", ", "");
    swap(relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !allowed(&send_review(&mut stream, &edit).await.unwrap().1) {
        assert!(
            Instant::now() < deadline,
            "the good policy was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGHUP forces a reload even without a change.
    let (_, before) = admin_get(server.admin, "/metrics").unwrap();
    assert!(
        before.contains("driftgate_policy_reloads_total{result=\"success\"} 2"),
        "{before}"
    );
    Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = admin_get(server.admin, "/metrics").unwrap();
        if metrics.contains("driftgate_policy_reloads_total{result=\"success\"} 3") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A policy bad from the start does not stop the process (a pod would crash-loop): it stays
/// up and not ready, says why in its log and in /readyz, answers reviews 503 with the reason,
/// and is ready and deciding once the file is fixed, without a restart.
#[tokio::test]
async fn a_bad_policy_at_start_leaves_it_running_unready_until_the_file_is_fixed() {
    install_crypto_provider();
    let bad = "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: x}\nspec: {namespaces: {include: []}}\n";
    let mut server = spawn_with(
        "badstart",
        Options::default().policy(bad).log("info", Stderr::File),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let readyz = loop {
        if let Ok(answer) = admin_get(server.admin, "/readyz") {
            break answer;
        }
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "serve exited:\n{}",
            server.log()
        );
        assert!(Instant::now() < deadline, "no /readyz:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(readyz.0, 503, "{readyz:?}");
    assert!(
        readyz
            .1
            .contains("example.yaml:4: spec.namespaces.include:"),
        "{readyz:?}"
    );
    let log = server.log();
    assert!(
        log.contains("no valid policy loaded yet")
            && log.contains("line=4 field=spec.namespaces.include"),
        "{log}"
    );
    assert!(
        server
            .metrics()
            .contains("driftgate_policy_valid{source=\"file\"} 0")
    );

    let mut stream = connect(&server).await;
    for name in ["kubectl-edit.json", "flux-ssa-update.json"] {
        let (status, body) = send_review(&mut stream, &fixture(name)).await.unwrap();
        assert_eq!(status, 503, "{name}");
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["kind"], "Status", "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("example.yaml:4: spec.namespaces.include:"),
            "{body}"
        );
    }
    // Still running after a few reload intervals of the same bad file.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "{}",
        server.log()
    );
    assert_eq!(admin_get(server.admin, "/readyz").unwrap().0, 503);

    let tmp = server.dir.join("policies/.tmp");
    std::fs::copy("policies/example.yaml", &tmp).unwrap();
    std::fs::rename(&tmp, server.policy_file()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin_get(server.admin, "/readyz").unwrap().0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready after the fix:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = send_review(&mut stream, &fixture("kubectl-edit.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(!allowed(&body));
    assert!(
        server
            .metrics()
            .contains("driftgate_policy_valid{source=\"file\"} 1")
    );
    assert!(server.child.try_wait().unwrap().is_none());
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    install_crypto_provider();
    let server = start("slowheaders");
    let mut stream = connect(&server).await;
    stream
        .write_all(b"POST /validate HTTP/1.1\r\nHost: local")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 256];
    // The server closes (or answers 408) once --header-timeout (1s) passes; it never waits forever.
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await;
    let outcome = read.expect("the server must not wait forever for headers");
    match outcome {
        Ok(0) | Err(_) => {}
        Ok(n) => assert!(
            String::from_utf8_lossy(&buffer[..n]).contains("408"),
            "{:?}",
            String::from_utf8_lossy(&buffer[..n])
        ),
    }
    assert!(started.elapsed() >= Duration::from_millis(500));
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_review_finish() {
    install_crypto_provider();
    let mut server = start("sigterm");
    let body = fixture("kubectl-edit.json");
    let mut stream = connect(&server).await;
    // Keep one connection idle in keep-alive: shutdown must close it.
    let mut idle = connect(&server).await;
    let (status, _) = send_review(&mut idle, &fixture("flux-ssa-update.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);

    // Start a review and stop halfway through its body: it is in flight.
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    // Readiness drops while draining.
    let deadline = Instant::now() + Duration::from_secs(5);
    while admin_get(server.admin, "/readyz")
        .map(|(s, _)| s == 200)
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "readiness did not drop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stream.write_all(&body[body.len() / 2..]).await.unwrap();
    let (status, answer) = read_response(&mut stream)
        .await
        .expect("the in-flight review is answered");
    assert_eq!(status, 200);
    assert!(!allowed(&answer));

    // The idle kept-alive connection is closed by the server.
    let mut buffer = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buffer)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "idle connection not closed: {closed:?}"
    );

    let exit = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().unwrap();
        let mut stderr = String::new();
        for line in BufReader::new(server.child.stderr.take().unwrap()).lines() {
            stderr.push_str(&line.unwrap());
            stderr.push('\n');
        }
        (status, stderr, server)
    })
    .await
    .unwrap();
    assert!(exit.0.success(), "exit {:?}; stderr:\n{}", exit.0, exit.1);
}

/// In a pod stderr is a pipe to the container runtime, not a terminal: the review lines must be
/// plain text, or `namespace=prod-payments` is no longer in them for anyone searching the logs.
#[tokio::test]
async fn log_lines_written_to_a_pipe_carry_no_terminal_colour_codes() {
    install_crypto_provider();
    let mut server = start_logging("plain-logs", "info");
    let mut stream = connect(&server).await;
    let (status, _) = send_review(&mut stream, &fixture("kubectl-edit.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    drop(stream);
    let stderr = server.stop_for_stderr();
    let review = stderr
        .lines()
        .find(|l| l.contains(" review "))
        .unwrap_or_else(|| panic!("no review line in:\n{stderr}"));
    assert!(!review.contains('\u{1b}'), "{review:?}");
    assert!(
        review.contains("namespace=prod-payments name=api user=bob"),
        "{review:?}"
    );
}

#[tokio::test]
async fn serve_dev_runs_from_a_fresh_checkout_and_says_how_to_call_it() {
    install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("driftgate-serve-dev-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::copy("policies/example.yaml", dir.join("policies/example.yaml")).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .args(["serve", "--dev", "--shutdown-delay", "0s"])
        .args([
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--admin-addr",
            &format!("127.0.0.1:{admin_port}"),
        ])
        .current_dir(&dir)
        // No kubeconfig anywhere: --dev runs without a cluster.
        .env("HOME", &dir)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains(&format!("curl --cacert certs-dev/ca.crt -H 'Content-Type: application/json' --data @tests/fixtures/kubectl-edit.json https://localhost:{port}/validate")),
        "{line}"
    );
    assert!(dir.join("certs-dev/tls.key").exists());
    let server = Server {
        child,
        dir: dir.clone(),
        webhook: format!("127.0.0.1:{port}").parse().unwrap(),
        admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
        ca: dir.join("certs-dev/ca.crt"),
    };
    let (status, body) = admin_get(server.admin, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let mut stream = connect(&server).await;
    let (status, answer) = send_review(&mut stream, &fixture("kubectl-edit.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(!allowed(&answer));
}

/// Issue 25: `serve --dev` is a local try. With a kubeconfig in reach (here one whose current
/// context names a cluster on a closed port), it still uses no cluster unless told to
/// (--kubeconfig or --context): it never watched, recorded or posted Events in whatever cluster
/// the current context happened to name.
#[test]
fn serve_dev_touches_no_cluster_unless_one_is_named() {
    let dir = std::env::temp_dir().join(format!("driftgate-dev-nokube-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::create_dir_all(dir.join(".kube")).unwrap();
    std::fs::copy("policies/example.yaml", dir.join("policies/example.yaml")).unwrap();
    let closed = free_port();
    std::fs::write(
        dir.join(".kube/config"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: prod\nclusters:\n- name: prod\n  cluster: {{server: 'https://127.0.0.1:{closed}'}}\ncontexts:\n- name: prod\n  context: {{cluster: prod, user: u}}\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let serve = |extra: &[&str]| {
        let (port, admin_port) = (free_port(), free_port());
        Command::new(BIN)
            .args(["serve", "--dev", "--shutdown-delay", "0s"])
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--admin-addr", &format!("127.0.0.1:{admin_port}")])
            .args(extra)
            .current_dir(&dir)
            .env("HOME", &dir)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The first log lines until "driftgate serving" (or the end), then the process stopped.
    let serving_line = |mut child: std::process::Child| {
        let mut lines = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            let done = line.contains("driftgate serving");
            lines.push(line);
            if done {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        lines.join("\n")
    };
    let log = serving_line(serve(&[]));
    assert!(log.contains("cluster=false"), "{log}");
    assert!(log.contains("--dev: no cluster"), "{log}");
    // Named: the context is used (its cluster is on a closed port, so what follows fails, but
    // it was asked for).
    let log = serving_line(serve(&["--context", "prod"]));
    assert!(!log.contains("--dev: no cluster"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 25: run outside a checkout, `serve --dev` has no policy to serve: it says so, makes
/// no certificates there, and does not print the curl banner.
#[test]
fn serve_dev_outside_a_checkout_says_the_policy_is_missing() {
    let dir = std::env::temp_dir().join(format!("driftgate-dev-elsewhere-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--dev"])
        .current_dir(&dir)
        .env("HOME", &dir)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success());
    assert!(!stdout.contains("curl"), "{stdout}");
    assert!(
        stderr.contains("--dev serves the example policy policies/example.yaml, which is not here: run it from a driftgate checkout, or pass --policy FILE"),
        "{stderr}"
    );
    assert!(!dir.join("certs-dev").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_outlives_the_header_timeout() {
    // The API server pools connections and reuses them after idle gaps: a connection idle for
    // longer than --header-timeout (1s here) must still be served.
    install_crypto_provider();
    let server = start("idle");
    let mut stream = connect(&server).await;
    let body = fixture("flux-ssa-update.json");
    assert_eq!(send_review(&mut stream, &body).await.unwrap().0, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(send_review(&mut stream, &body).await.unwrap().0, 200);
}

/// A username is the client's text: with a newline in it, the review's log line must stay one
/// line (escaped), or it could forge a second review line in the text format.
#[tokio::test]
async fn request_text_cannot_forge_a_log_line() {
    install_crypto_provider();
    let mut server = start_logging("forged-logs", "info");
    let mut stream = connect(&server).await;
    let mut review: serde_json::Value =
        serde_json::from_slice(&fixture("kubectl-edit.json")).unwrap();
    review["request"]["userInfo"]["username"] =
        serde_json::json!("bob\n2026-12-01T00:00:00Z INFO review user=admin decision=allowed");
    let (status, body) = send_review(&mut stream, &serde_json::to_vec(&review).unwrap())
        .await
        .unwrap();
    assert_eq!(status, 200);
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("bob\\\\n2026"),
        "the denial escapes it too: {body}"
    );
    drop(stream);
    let stderr = server.stop_for_stderr();
    let reviews: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("driftgate::server: review "))
        .collect();
    assert_eq!(reviews.len(), 1, "{stderr}");
    assert!(
        reviews[0].contains(r"user=bob\n2026-12-01T00:00:00Z INFO review user=admin"),
        "{}",
        reviews[0]
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("2026-12-01T00:00:00Z")),
        "{stderr}"
    );
}

/// Writes no policy guards are most of a cluster's: their review lines are at debug, so at the
/// default level only the guarded write's line is logged, and at debug both are.
#[tokio::test]
async fn reviews_out_of_scope_are_logged_at_debug_only() {
    install_crypto_provider();
    for filter in ["info", "driftgate=debug"] {
        let mut server = start_logging(&format!("scope-logs-{}", filter.len()), filter);
        let mut stream = connect(&server).await;
        for name in ["out-of-scope-namespace.json", "kubectl-edit.json"] {
            let (status, _) = send_review(&mut stream, &fixture(name)).await.unwrap();
            assert_eq!(status, 200, "{name}");
        }
        drop(stream);
        let stderr = server.stop_for_stderr();
        let reviews: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("driftgate::server: review "))
            .collect();
        let guarded = reviews
            .iter()
            .filter(|l| l.contains(" INFO ") && l.contains("rule=\"NotPermitted\""))
            .count();
        let out_of_scope = reviews
            .iter()
            .filter(|l| l.contains(" DEBUG ") && l.contains("rule=\"OutOfScope\""))
            .count();
        let expected = if filter == "info" { 0 } else { 1 };
        assert_eq!(
            (reviews.len(), guarded, out_of_scope),
            (1 + expected, 1, expected),
            "RUST_LOG={filter}:\n{stderr}"
        );
    }
}

/// A fatal error is said once, in the log's format: with `--log-format json` one JSON object
/// (log collectors parse every line), as text otherwise.
#[test]
fn a_fatal_error_is_one_line_in_the_log_format() {
    use std::io::Read;
    for format in ["json", "text"] {
        let missing = std::env::temp_dir().join("driftgate-fatal-no-such-cert.pem");
        let mut server = spawn_with(
            &format!("fatal-{format}"),
            Options::default()
                .flag("--tls-cert", &missing)
                .flag("--log-format", format),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "serve did not exit");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        server
            .child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(1), "{stderr}");
        let fatal: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("driftgate-fatal-no-such-cert.pem"))
            .collect();
        assert_eq!(fatal.len(), 1, "--log-format {format}:\n{stderr}");
        let parsed = serde_json::from_str::<serde_json::Value>(fatal[0]);
        if format == "json" {
            for line in stderr.lines() {
                assert!(
                    serde_json::from_str::<serde_json::Value>(line).is_ok(),
                    "{line}"
                );
            }
            let line = parsed.unwrap();
            assert_eq!(line["level"], "ERROR", "{line}");
            assert_eq!(line["message"], "driftgate serve failed", "{line}");
            assert!(
                line["error"]
                    .as_str()
                    .unwrap()
                    .ends_with("driftgate-fatal-no-such-cert.pem: cannot be read: No such file or directory (os error 2)"),
                "{line}"
            );
        } else {
            assert!(parsed.is_err(), "{}", fatal[0]);
            assert!(
                fatal[0].contains(" ERROR driftgate::cli: driftgate serve failed error="),
                "{}",
                fatal[0]
            );
        }
    }
}

/// Log lines are written by a thread of their own: with stderr a pipe that nobody reads (a
/// stalled log collector), reviews are still answered, and the lines that find the log's queue
/// full are dropped and counted.
#[tokio::test]
async fn a_stalled_stderr_holds_no_review_and_its_dropped_lines_are_counted() {
    install_crypto_provider();
    // Two lines a review (the review's and its Event's): the pipe (64 KiB) fills within ~100
    // reviews, then the queue within a few more.
    let server = start_with(
        "stalled-logs",
        Options::default()
            .log("info", Stderr::Pipe)
            .flag("--log-queue-lines", "16"),
    );
    let dropped = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("driftgate_log_lines_dropped_total "))
            .unwrap_or_else(|| panic!("no driftgate_log_lines_dropped_total in:\n{metrics}"))
            .parse()
            .unwrap()
    };
    let mut stream = connect(&server).await;
    let body = fixture("kubectl-edit.json");
    let mut reviews = 0;
    while dropped(&server.metrics()) == 0 {
        assert!(reviews < 2_000, "no line dropped after {reviews} reviews");
        for _ in 0..50 {
            // Bounded only so that a review held by the log fails rather than hangs the test.
            let answer =
                tokio::time::timeout(Duration::from_secs(30), send_review(&mut stream, &body))
                    .await
                    .expect("a review waited for the log");
            assert_eq!(answer.unwrap().0, 200);
        }
        reviews += 50;
    }
    let metrics = server.metrics();
    assert!(
        metrics.contains("# TYPE driftgate_log_lines_dropped counter"),
        "{metrics}"
    );
    // Counted as they are dropped: every review since adds more.
    let before = dropped(&metrics);
    for _ in 0..50 {
        assert_eq!(send_review(&mut stream, &body).await.unwrap().0, 200);
    }
    assert!(dropped(&server.metrics()) > before);
}

/// The README's commands to try `serve --dev` (the block after "From a second terminal"), run
/// as written against a real `serve --dev`, only the port and the CA's directory changed: the
/// README says bob's edit is denied and alice's under a window admitted with a warning.
#[tokio::test]
async fn the_readmes_curl_commands_against_serve_dev_do_what_it_says() {
    install_crypto_provider();
    let readme = std::fs::read_to_string("README.md").unwrap();
    let block = readme
        .split("From a second terminal:\n\n```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the README's block of commands for serve --dev");
    // Commands as a shell reads them: continued lines joined, comments left out.
    let commands: Vec<String> = block
        .replace("\\\n", " ")
        .replace("|\n", "| ")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    assert_eq!(commands.len(), 2, "{block}");

    let dir = std::env::temp_dir().join(format!("driftgate-readme-curl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::copy("policies/example.yaml", dir.join("policies/example.yaml")).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let child = Command::new(BIN)
        .args(["serve", "--dev", "--shutdown-delay", "0s"])
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .args(["--admin-addr", &format!("127.0.0.1:{admin_port}")])
        .current_dir(&dir)
        .env("HOME", &dir)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        dir: dir.clone(),
        webhook: format!("127.0.0.1:{port}").parse().unwrap(),
        admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
        ca: dir.join("certs-dev/ca.crt"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(admin_get(server.admin, "/readyz"), Ok((200, _))) {
        assert!(Instant::now() < deadline, "serve --dev never got ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut answers = Vec::new();
    for command in &commands {
        let command = command
            .replace("localhost:8443", &format!("localhost:{port}"))
            .replace("certs-dev/ca.crt", &server.ca.display().to_string());
        let out = Command::new("bash")
            .args(["-c", &format!("set -o pipefail; {command}")])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{command}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        answers.push(answer["response"].clone());
    }
    assert_eq!(answers[0]["allowed"], false, "{}", answers[0]);
    assert_eq!(answers[0]["auditAnnotations"]["rule"], "NotPermitted");
    assert_eq!(answers[1]["allowed"], true, "{}", answers[1]);
    assert_eq!(answers[1]["auditAnnotations"]["rule"], "BreakGlassWindow");
    let warning = answers[1]["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.contains("backport"), "{warning}");
}

/// Issue 28: a refusal and its Event say who writes here in one wording, whether the policy has
/// one controller (gitops: flux) or several (production: flux, kubernetes).
#[tokio::test]
async fn a_refusal_and_its_event_say_who_writes_here_in_the_same_words() {
    install_crypto_provider();
    let mut server = start_logging("one-wording", "info");
    let mut messages = Vec::new();
    for (name, writers) in [
        (
            "gitops-kustomization-images-by-bob.json",
            "only its controllers (flux) write here",
        ),
        (
            "kubectl-edit.json",
            "only its controllers (flux, kubernetes) write here",
        ),
    ] {
        let mut stream = connect(&server).await;
        let (status, body) = send_review(&mut stream, &fixture(name)).await.unwrap();
        assert_eq!(status, 200, "{name}");
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let message = answer["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains(&format!(": {writers} (policy ")),
            "{message}"
        );
        messages.push((writers, message));
    }
    let stderr = server.stop_for_stderr();
    for (writers, message) in messages {
        // The Event's note (logged: no cluster) is the response's message, word for word.
        let subject = message.split(": ").next().unwrap();
        let event = stderr
            .lines()
            .find(|l| l.contains("Kubernetes Event") && l.contains(subject))
            .unwrap_or_else(|| panic!("no Event for {subject:?} in:\n{stderr}"));
        assert!(event.contains(writers), "{event}");
        assert!(
            event.contains(&message.replace('"', "\\\"")) || event.contains(&message),
            "the Event's note is not the message {message:?}: {event}"
        );
    }
}
