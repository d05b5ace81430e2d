//! Runtime certificates, the I/O part: every replica reads and watches the Secret, serves its
//! current certificate, and takes the step [`rotation::plan`] says; the caBundle writer writes
//! only while leading.
//!
//! Writes to the Secret are races between replicas, settled by the API server: a create fails
//! with 409 if another replica created it first, and a replace carries the resourceVersion it
//! was planned from, so it fails with 409 if another replica wrote in between. The loser reads
//! the winner's Secret and plans again from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use driftgate_core::certs::issue_generation;
use driftgate_core::certs::pem::{TlsFiles, certified_key_from_pem};
use driftgate_core::certs::rotation::{self, Generation, Step, Stored, StoredError, Timing};
use driftgate_core::timefmt::positive_flag_duration;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::metrics::Metrics;

/// The field manager of the caBundle writes: it owns `webhooks[name=X].clientConfig.caBundle`
/// and nothing else, so it never conflicts with whoever applies the rest of the configuration.
pub const CA_BUNDLE_FIELD_MANAGER: &str = "driftgate-ca-bundle";

/// `serve`'s flags for runtime mode: driftgate keeps its own CA and serving certificate in a
/// Secret and the CA in its webhook configuration's caBundle.
#[derive(Debug, Clone, Args)]
pub struct RuntimeCertArgs {
    /// Keep the CA and serving certificate in this Secret (NAME in $POD_NAMESPACE, or
    /// NAMESPACE/NAME), created when missing and rotated before expiry, instead of
    /// --tls-cert/--tls-key files.
    #[arg(long, value_name = "[NAMESPACE/]NAME", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub tls_secret: Option<String>,
    /// The namespace of a --tls-secret given without one.
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "POD_NAMESPACE",
        hide_env_values = true
    )]
    pub pod_namespace: Option<String>,
    /// A DNS name or IP address of the serving certificate (the Service's names); repeat.
    #[arg(long = "tls-secret-host", value_name = "NAME", requires = "tls_secret")]
    pub hosts: Vec<String>,
    /// How long each generated CA and serving certificate is valid.
    #[arg(long, value_name = "DURATION", default_value = "90d", value_parser = positive_flag_duration)]
    pub cert_validity: Duration,
    /// Start a rotation this long before the serving certificate expires.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = positive_flag_duration)]
    pub cert_renew_before: Duration,
    /// How long a new caBundle must be live before its certificate is served, and how long
    /// after a rotation the old CA stays trusted (the API server's informer, replicas'
    /// watches catching up).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_flag_duration)]
    pub ca_bundle_settle: Duration,
    /// The ValidatingWebhookConfiguration whose caBundle driftgate writes.
    #[arg(long, value_name = "NAME", requires = "tls_secret")]
    pub webhook_configuration: Option<String>,
    /// A webhook in --webhook-configuration whose caBundle driftgate writes; repeat.
    #[arg(
        long = "ca-bundle-webhook",
        value_name = "NAME",
        requires = "webhook_configuration"
    )]
    pub ca_bundle_webhooks: Vec<String>,
    /// Read the Secret and the caBundle at least this often (changes to the Secret are
    /// watched and acted on at once).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_flag_duration)]
    pub cert_check_interval: Duration,
}

/// Why runtime mode cannot start or a step failed; each names the object.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeCertError {
    #[error(
        "--tls-secret {name:?} names no namespace and $POD_NAMESPACE is not set; write \
         NAMESPACE/NAME or pass --pod-namespace"
    )]
    NoNamespace { name: String },
    #[error(
        "--cert-renew-before ({renew_before:?}) must be shorter than --cert-validity \
         ({validity:?}) and longer than twice --ca-bundle-settle ({settle:?}), or a rotation \
         cannot finish before the certificate expires"
    )]
    BadTiming {
        validity: Duration,
        renew_before: Duration,
        settle: Duration,
    },
    #[error(
        "--tls-secret needs at least one --tls-secret-host (the Service's DNS names, such as \
         driftgate.driftgate.svc): a certificate for no name verifies for nobody"
    )]
    NoHosts,
    #[error("--tls-secret needs a cluster (it is kept in the API server); drop --no-kube")]
    NoCluster,
    #[error("cannot read Secret {secret}: {source}")]
    ReadSecret { secret: String, source: kube::Error },
    #[error("cannot write Secret {secret} ({step}): {source}")]
    WriteSecret {
        secret: String,
        step: &'static str,
        source: kube::Error,
    },
    #[error("cannot generate a certificate for Secret {secret}: {source}")]
    Issue {
        secret: String,
        source: driftgate_core::Error,
    },
    #[error(
        "cannot read ValidatingWebhookConfiguration {configuration} (is it applied, and may \
         driftgate get it?): {source}"
    )]
    ReadWebhooks {
        configuration: String,
        source: kube::Error,
    },
    #[error(
        "cannot write the caBundle of ValidatingWebhookConfiguration {configuration}: {source}; \
         check that it exists with webhooks named as --ca-bundle-webhook"
    )]
    WriteBundle {
        configuration: String,
        source: kube::Error,
    },
}

/// The checked settings of runtime mode.
#[derive(Debug, Clone)]
pub struct RuntimeCerts {
    pub namespace: String,
    pub name: String,
    pub hosts: Vec<String>,
    pub validity: Duration,
    pub timing: Timing,
    pub webhook_configuration: Option<String>,
    pub webhooks: Vec<String>,
    pub check_interval: Duration,
}

impl RuntimeCertArgs {
    /// The settings, when --tls-secret is given.
    pub fn settings(&self) -> Result<Option<RuntimeCerts>, RuntimeCertError> {
        let Some(secret) = &self.tls_secret else {
            return Ok(None);
        };
        let (namespace, name) = match secret.split_once('/') {
            Some((namespace, name)) => (namespace.to_owned(), name.to_owned()),
            None => match &self.pod_namespace {
                Some(namespace) => (namespace.clone(), secret.clone()),
                None => {
                    return Err(RuntimeCertError::NoNamespace {
                        name: secret.clone(),
                    });
                }
            },
        };
        if self.hosts.is_empty() {
            return Err(RuntimeCertError::NoHosts);
        }
        if self.cert_renew_before >= self.cert_validity
            || self.cert_renew_before <= self.ca_bundle_settle * 2
        {
            return Err(RuntimeCertError::BadTiming {
                validity: self.cert_validity,
                renew_before: self.cert_renew_before,
                settle: self.ca_bundle_settle,
            });
        }
        let signed = |d: Duration| SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
        Ok(Some(RuntimeCerts {
            namespace,
            name,
            hosts: self.hosts.clone(),
            validity: self.cert_validity,
            timing: Timing {
                renew_before: signed(self.cert_renew_before),
                settle: signed(self.ca_bundle_settle),
            },
            webhook_configuration: self.webhook_configuration.clone(),
            webhooks: self.ca_bundle_webhooks.clone(),
            check_interval: self.cert_check_interval.max(Duration::from_millis(100)),
        }))
    }
}

/// The server-side apply patch that sets only `caBundle` of each named webhook: the webhooks
/// list is keyed by name, so this claims no other field of them.
pub fn ca_bundle_patch(configuration: &str, webhooks: &[String], pems: &[String]) -> Value {
    let bundle = ByteString(pems.concat().into_bytes());
    let entries: Vec<Value> = webhooks
        .iter()
        .map(|name| json!({"name": name, "clientConfig": {"caBundle": bundle}}))
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": configuration},
        "webhooks": entries,
    })
}

/// The serving certificate of runtime mode: swapped in place when the Secret changes, so new
/// handshakes get the new certificate while established connections keep theirs. Empty until
/// the first certificate is stored; a handshake then fails (no certificate to offer).
#[derive(Debug, Default)]
pub struct CertSlot(arc_swap::ArcSwapOption<CertifiedKey>);

impl CertSlot {
    pub fn store(&self, certified: Arc<CertifiedKey>) {
        self.0.store(Some(certified));
    }

    pub fn is_loaded(&self) -> bool {
        self.0.load().is_some()
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.load_full()
    }
}

/// Writes the caBundle, only while `leading` says this replica leads.
pub struct CaBundleWriter {
    api: Api<ValidatingWebhookConfiguration>,
    configuration: String,
    webhooks: Vec<String>,
    leading: watch::Receiver<bool>,
}

impl CaBundleWriter {
    pub fn new(
        client: Client,
        configuration: String,
        webhooks: Vec<String>,
        leading: watch::Receiver<bool>,
    ) -> Self {
        CaBundleWriter {
            api: Api::all(client),
            configuration,
            webhooks,
            leading,
        }
    }

    /// The CAs (DER) each configured webhook's live caBundle holds; a webhook that is not in
    /// the configuration holds none.
    pub async fn live(&self) -> Result<Vec<BTreeSet<Vec<u8>>>, RuntimeCertError> {
        let configuration = self.api.get(&self.configuration).await.map_err(|source| {
            RuntimeCertError::ReadWebhooks {
                configuration: self.configuration.clone(),
                source,
            }
        })?;
        let webhooks = configuration.webhooks.unwrap_or_default();
        Ok(self
            .webhooks
            .iter()
            .map(|name| {
                webhooks
                    .iter()
                    .find(|w| &w.name == name)
                    .and_then(|w| w.client_config.ca_bundle.as_ref())
                    .map(|bundle| rotation::bundle_cas(&bundle.0))
                    .unwrap_or_default()
            })
            .collect())
    }

    /// Applies `pems` as the caBundle; false when not leading (the leader writes).
    pub async fn write(&self, pems: &[String]) -> Result<bool, RuntimeCertError> {
        if !*self.leading.borrow() {
            return Ok(false);
        }
        let patch = ca_bundle_patch(&self.configuration, &self.webhooks, pems);
        // force: a caBundle rendered by an older chart (helm's field manager) is taken over.
        let params = PatchParams::apply(CA_BUNDLE_FIELD_MANAGER).force();
        self.api
            .patch(&self.configuration, &params, &Patch::Apply(&patch))
            .await
            .map_err(|source| RuntimeCertError::WriteBundle {
                configuration: self.configuration.clone(),
                source,
            })?;
        Ok(true)
    }
}

/// One replica's side of runtime mode.
struct Keeper {
    settings: RuntimeCerts,
    secrets: Api<Secret>,
    writer: Option<CaBundleWriter>,
    slot: Arc<CertSlot>,
    metrics: Arc<Metrics>,
    /// The serial of the certificate `slot` serves.
    serving: Option<String>,
}

/// Starts runtime mode: serves the Secret's certificate through `slot` (empty until the
/// Secret exists and loads), and rotates it. `leading` gates the caBundle writes (pass the
/// Lease's receiver; with one replica, `watch::channel(true)`).
pub fn spawn(
    client: Client,
    settings: RuntimeCerts,
    slot: Arc<CertSlot>,
    leading: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Vec<JoinHandle<()>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let changed = Arc::new(Notify::new());
    let watch_task = spawn_secret_watch(
        secrets.clone(),
        settings.name.clone(),
        changed.clone(),
        shutdown.clone(),
    );
    let writer = settings.webhook_configuration.clone().map(|configuration| {
        CaBundleWriter::new(client, configuration, settings.webhooks.clone(), leading)
    });
    let mut keeper = Keeper {
        settings,
        secrets,
        writer,
        slot,
        metrics,
        serving: None,
    };
    let keeper_task = tokio::spawn(async move {
        loop {
            let wait = match keeper.round().await {
                Ok(wait) => wait,
                Err(error) => {
                    keeper.count_failure(&error);
                    tracing::warn!(%error, "runtime certificates: trying again");
                    keeper.settings.check_interval
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = changed.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    });
    vec![watch_task, keeper_task]
}

/// Wakes the keeper whenever the Secret changes.
fn spawn_secret_watch(
    secrets: Api<Secret>,
    name: String,
    changed: Arc<Notify>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(secrets, config).default_backoff().touched_objects();
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                item = stream.next() => match item {
                    Some(Ok(_)) => changed.notify_one(),
                    Some(Err(error)) => tracing::warn!(%error, secret = %name, "watching the certificate Secret failed; retrying"),
                    None => return,
                },
            }
        }
    })
}

impl Keeper {
    fn secret_name(&self) -> String {
        format!("{}/{}", self.settings.namespace, self.settings.name)
    }

    fn count_failure(&self, error: &RuntimeCertError) {
        if matches!(error, RuntimeCertError::WriteBundle { .. }) {
            Metrics::count_result(&self.metrics.ca_bundle_writes, false);
        }
    }

    /// Reads, serves, plans and takes one step; returns how long to wait before the next
    /// round (a change to the Secret wakes it sooner).
    async fn round(&mut self) -> Result<Duration, RuntimeCertError> {
        let secret = self
            .secrets
            .get_opt(&self.settings.name)
            .await
            .map_err(|source| RuntimeCertError::ReadSecret {
                secret: self.secret_name(),
                source,
            })?;
        let stored = secret.as_ref().map(|s| {
            let data: BTreeMap<String, Vec<u8>> = s
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            rotation::from_data(&data)
        });
        if let Some(Ok(stored)) = &stored {
            self.serve(&stored.current);
        }
        // A configuration that cannot be read (not applied yet) trusts nothing: the Secret is
        // still created and served, and no step that needs the bundle is taken.
        let live = match &self.writer {
            Some(writer) => match writer.live().await {
                Ok(live) => Some(live),
                Err(error) => {
                    tracing::warn!(%error, "the caBundle cannot be read; the certificate rotation waits for it");
                    None
                }
            },
            None => Some(Vec::new()),
        };
        let untrusted = vec![BTreeSet::new(); self.settings.webhooks.len().max(1)];
        let now = Timestamp::now();
        let step = rotation::plan(
            now,
            stored.as_ref(),
            live.as_deref().unwrap_or(&untrusted),
            self.settings.timing,
        );
        if live.is_none() && matches!(step, Step::WriteBundle(_)) {
            return Ok(self.settings.check_interval);
        }
        self.take(step, secret, stored, now).await
    }

    /// Serves `current` if it is not what is serving already.
    fn serve(&mut self, current: &Generation) {
        if self.serving.as_deref() == Some(current.serial.as_str()) {
            return;
        }
        let labels = TlsFiles {
            cert: format!("Secret {} key tls.crt", self.secret_name()).into(),
            key: format!("Secret {} key tls.key", self.secret_name()).into(),
        };
        // from_data checked the pair already; this cannot fail for a stored generation.
        match certified_key_from_pem(
            &labels,
            current.cert_pem.as_bytes(),
            current.key_pem.as_bytes(),
        ) {
            Ok(certified) => {
                self.slot.store(Arc::new(certified));
                if self.serving.is_some() {
                    self.metrics.certificate_rotations.inc();
                }
                self.metrics
                    .serving_certificate_expiry
                    .set(current.not_after.as_second() as f64);
                tracing::info!(secret = %self.secret_name(), serial = %current.serial, expires = %current.not_after, "serving the certificate from the Secret; new connections use it");
                self.serving = Some(current.serial.clone());
            }
            Err(error) => tracing::warn!(%error, "the Secret's serving certificate does not load"),
        }
    }

    async fn take(
        &mut self,
        step: Step,
        secret: Option<Secret>,
        stored: Option<Result<Stored, StoredError>>,
        now: Timestamp,
    ) -> Result<Duration, RuntimeCertError> {
        let interval = self.settings.check_interval;
        match &step {
            Step::Wait { until } => {
                let left = until.duration_since(now).unsigned_abs();
                return Ok(left.min(interval) + Duration::from_millis(50));
            }
            Step::WriteBundle(pems) => {
                let Some(writer) = &self.writer else {
                    return Ok(interval);
                };
                if writer.write(pems).await? {
                    Metrics::count_result(&self.metrics.ca_bundle_writes, true);
                    tracing::info!(
                        configuration = writer.configuration,
                        cas = pems.len(),
                        "caBundle written"
                    );
                }
                // Read back soon: the next step waits for this write to be live.
                return Ok(interval.min(Duration::from_millis(500)));
            }
            Step::Regenerate(reason) => tracing::warn!(
                secret = %self.secret_name(),
                "replacing the certificate Secret with a new CA and certificate, because {reason}; \
                 webhook calls fail until the caBundle holds the new CA"
            ),
            _ => {}
        }
        let fresh = match step {
            Step::Create | Step::Regenerate(_) | Step::StartRotation => Some(
                issue_generation(now, self.settings.validity, &self.settings.hosts).map_err(
                    |source| RuntimeCertError::Issue {
                        secret: self.secret_name(),
                        source,
                    },
                )?,
            ),
            _ => None,
        };
        let Some(next) = rotation::after(stored.and_then(Result::ok), &step, now, fresh) else {
            return Ok(interval);
        };
        self.write_secret(&step, secret, &next).await?;
        Ok(Duration::ZERO)
    }

    /// Creates or replaces the Secret; losing the race to another replica is no failure.
    async fn write_secret(
        &self,
        step: &Step,
        secret: Option<Secret>,
        stored: &Stored,
    ) -> Result<(), RuntimeCertError> {
        let data = rotation::to_data(stored)
            .into_iter()
            .map(|(k, v)| (k, ByteString(v.into_bytes())))
            .collect();
        let step_name = step_name(step);
        let result = match secret {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.settings.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/managed-by".to_owned(),
                            "driftgate".to_owned(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("Opaque".to_owned()),
                    data: Some(data),
                    ..Secret::default()
                };
                self.secrets.create(&PostParams::default(), &secret).await
            }
            // Replaced as read, resourceVersion included: the precondition of the race.
            Some(mut secret) => {
                secret.data = Some(data);
                secret.string_data = None;
                self.secrets
                    .replace(&self.settings.name, &PostParams::default(), &secret)
                    .await
            }
        };
        match result {
            Ok(_) => {
                tracing::info!(secret = %self.secret_name(), step = step_name, "certificate Secret written");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(secret = %self.secret_name(), step = step_name, "another replica wrote the Secret first; adopting it");
                Ok(())
            }
            Err(source) => Err(RuntimeCertError::WriteSecret {
                secret: self.secret_name(),
                step: step_name,
                source,
            }),
        }
    }
}

fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Create => "create",
        Step::Regenerate(_) => "regenerate",
        Step::WriteBundle(_) => "write caBundle",
        Step::StartRotation => "start rotation",
        Step::MarkTrusted => "mark the new CA trusted",
        Step::Promote => "serve the new certificate",
        Step::Retire => "retire the old CA",
        Step::Wait { .. } => "wait",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_bundle_patch_names_only_each_webhook_and_its_ca_bundle() {
        let patch = ca_bundle_patch(
            "driftgate",
            &[
                "gate.driftgate.dev".to_owned(),
                "records.driftgate.dev".to_owned(),
            ],
            &["A\n".to_owned(), "B\n".to_owned()],
        );
        assert_eq!(
            patch,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "driftgate"},
                "webhooks": [
                    {"name": "gate.driftgate.dev", "clientConfig": {"caBundle": "QQpCCg=="}},
                    {"name": "records.driftgate.dev", "clientConfig": {"caBundle": "QQpCCg=="}},
                ],
            })
        );
    }

    /// The flags `extra`, with one --tls-secret-host.
    fn args(extra: &[&str]) -> RuntimeCertArgs {
        let mut with_host = extra.to_vec();
        with_host.extend(["--tls-secret-host", "driftgate.driftgate.svc"]);
        parse(&with_host)
    }

    fn parse(extra: &[&str]) -> RuntimeCertArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            certs: RuntimeCertArgs,
            #[arg(long)]
            tls_cert: Option<String>,
            #[arg(long)]
            tls_key: Option<String>,
        }
        let mut argv = vec!["driftgate"];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::try_parse_from(argv)
            .expect("flags parse")
            .certs
    }

    #[test]
    fn a_secret_without_a_namespace_takes_the_pods() {
        let settings = args(&["--tls-secret", "tls", "--pod-namespace", "driftgate"])
            .settings()
            .expect("valid")
            .expect("runtime mode");
        assert_eq!(
            (settings.namespace.as_str(), settings.name.as_str()),
            ("driftgate", "tls")
        );
        let settings = args(&["--tls-secret", "ns/tls"])
            .settings()
            .unwrap()
            .unwrap();
        assert_eq!(settings.namespace, "ns");
    }

    #[test]
    fn a_certificate_for_no_name_is_refused_with_a_sentence() {
        let error = parse(&["--tls-secret", "ns/tls"]).settings().unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("--tls-secret needs at least one --tls-secret-host"),
            "{error}"
        );
    }

    #[test]
    fn timings_that_cannot_finish_a_rotation_are_refused_with_a_sentence() {
        let error = args(&[
            "--tls-secret",
            "ns/tls",
            "--cert-validity",
            "40s",
            "--cert-renew-before",
            "15s",
            "--ca-bundle-settle",
            "10s",
        ])
        .settings()
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("longer than twice --ca-bundle-settle"),
            "{error}"
        );
        assert!(
            args(&[
                "--cert-validity",
                "1d",
                "--cert-renew-before",
                "2d",
                "--tls-secret",
                "a/b"
            ])
            .settings()
            .is_err()
        );
    }
}
