//! A canned HTTP API server for the CLI's failure paths (answers the real kube-apiserver of the
//! e2e suite cannot be made to give on demand: a 500 on every list, RBAC on some kinds, no
//! answer at all). The CLI's success paths run against the real API server in `tests/e2e`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One answer: status code and JSON body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn json(status: u16, body: serde_json::Value) -> Answer {
        Answer {
            status,
            body: body.to_string(),
        }
    }

    /// A Kubernetes `Status` failure, as the API server sends it.
    pub fn status(code: u16, reason: &str, message: &str) -> Answer {
        Answer::json(
            code,
            serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": message, "reason": reason, "code": code
            }),
        )
    }
}

/// What the fake does with a request (`METHOD`, path with query): answer, or never answer.
pub enum Reply {
    Answer(Answer),
    Silence,
}

type Handler = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// A server on a loopback port, answering every request with `handler`; the requests it saw
/// are kept (`METHOD path`), in order. It lives as long as the test process.
pub struct FakeApiServer {
    pub url: String,
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl FakeApiServer {
    pub fn start(handler: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (handler, seen) = (handler.clone(), seen.clone());
                std::thread::spawn(move || serve(stream, &*handler, &seen));
            }
        });
        FakeApiServer { url, requests }
    }

    /// A kubeconfig whose current context is this server, with namespace `ctx-ns`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("fake-kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters: [{{name: fake, cluster: {{server: \"{}\"}}}}]\n\
                 users: [{{name: someone, user: {{token: t}}}}]\n\
                 contexts: [{{name: fake, context: {{cluster: fake, user: someone, namespace: ctx-ns}}}}]\n\
                 current-context: fake\n",
                self.url
            ),
        )
        .unwrap();
        path
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// HTTP/1.1 keep-alive: requests one after another on the connection until it closes.
fn serve(stream: TcpStream, handler: &Handler, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut content_length = 0;
        let mut aggregated = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.trim().parse().unwrap_or(0);
            }
            if name.eq_ignore_ascii_case("accept") && value.contains("as=APIGroupDiscoveryList") {
                aggregated = true;
            }
        }
        let mut body = vec![0; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        seen.lock().unwrap().push(format!("{method} {path}"));
        // Aggregated discovery is not served (406), so the client reads the legacy documents.
        let reply = if aggregated {
            Reply::Answer(Answer::status(
                406,
                "NotAcceptable",
                "aggregated discovery is not served",
            ))
        } else {
            handler(method, path)
        };
        match reply {
            Reply::Silence => {
                // Hold the connection open and say nothing, as a hung server.
                std::thread::sleep(std::time::Duration::from_secs(600));
                return;
            }
            Reply::Answer(answer) => {
                let response = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
                    answer.status,
                    answer.body.len(),
                    answer.body
                );
                if stream.write_all(response.as_bytes()).is_err() {
                    return;
                }
            }
        }
    }
}

/// The legacy discovery documents of a cluster serving core `v1` (namespaces, configmaps) and
/// `apps/v1` (deployments), or `None` for a path that is not discovery.
pub fn discovery(path: &str) -> Option<Answer> {
    let verbs = serde_json::json!(["get", "list", "patch"]);
    let body = match path {
        "/api" => {
            serde_json::json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        }
        "/apis" => serde_json::json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                        "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]
        }),
        "/api/v1" => serde_json::json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [
                {"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace", "verbs": verbs},
                {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": verbs}
            ]
        }),
        "/apis/apps/v1" => serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
            "resources": [
                {"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "verbs": verbs}
            ]
        }),
        _ => return None,
    };
    Some(Answer::json(200, body))
}
