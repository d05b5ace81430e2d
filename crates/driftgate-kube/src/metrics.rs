//! Prometheus metrics, served on the admin port at `/metrics`.

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use driftgate_core::silence::ControllerKey;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    /// `allowed`, `allowed-audit`, `denied` or `invalid`.
    pub decision: Cow<'static, str>,
    /// Static but for the policy: the key is built for every review.
    pub rule: Cow<'static, str>,
    pub policy: Cow<'static, str>,
    pub operation: Cow<'static, str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success` or `failure`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// Where policies come from: `file` (the `--policy` path: a file, a directory or a
    /// ConfigMap mount).
    pub source: String,
}

/// The `source` of the `--policy` path in `driftgate_policy_valid`.
pub const FILE_SOURCE: &str = "file";
/// The `source` of GatePolicy objects (`serve --gatepolicies`) in `driftgate_policy_valid`.
pub const GATEPOLICIES_SOURCE: &str = "gatepolicies";

/// One policy's controller; bounded by the policies (see `silence`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub policy: String,
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SuspensionLabels {
    pub policy: String,
    /// `open`, `expired` (past its expiry: forgotten) or `unbounded` (no expiry).
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResumeLabels {
    pub policy: String,
    /// `success`, `conflict` (changed since it was read: re-read next round), `failure`, or
    /// `not_undoable` (left alone and said so, once).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

/// Every metric driftgate exports. One instance, shared through `Arc`.
pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub review_duration: Histogram,
    pub break_glass_windows_open: Gauge,
    /// Suspended GitOps objects, by policy and state (see `suspensions`).
    pub suspensions: Family<SuspensionLabels, Gauge>,
    /// Objects reviewed with a break-glass label past its expiry, by policy.
    pub break_glass_labels_expired: Family<PolicyLabels, Gauge>,
    /// Expired suspensions driftgate resumed itself (`--resume-expired-suspensions`), by policy
    /// and result.
    pub suspension_resumes: Family<ResumeLabels, Counter>,
    /// Events accepted by the API server, by reason (`BreakGlassChange`, `WriteDenied`, ...).
    pub events_published: Family<ReasonLabels, Counter>,
    /// Events not published, by why (`queue_full`, `api_error`, `shutdown`).
    pub events_dropped: Family<ReasonLabels, Counter>,
    pub policy_reloads: Family<ResultLabels, Counter>,
    pub policy_last_reload: Gauge<f64, AtomicU64>,
    /// 1 while a source's current content loaded, 0 while it is refused (whatever still serves).
    pub policy_valid: Family<SourceLabels, Gauge>,
    pub tls_reloads: Family<ResultLabels, Counter>,
    pub parent_lookups: Family<ResultLabels, Counter>,
    /// 1 when the namespace cache is synced and trusted.
    pub namespace_cache_ready: Gauge,
    pub build_info: Family<BuildLabels, Gauge>,
    /// Backport records whose window ended and that Git has not caught up with.
    pub backport_pending: Gauge,
    pub backport_oldest_pending_seconds: Gauge<f64, AtomicU64>,
    /// The oldest record awaiting backport that no pull request is linked to, and that one is.
    pub backport_oldest_unlinked_seconds: Gauge<f64, AtomicU64>,
    pub backport_oldest_linked_seconds: Gauge<f64, AtomicU64>,
    pub emergency_changes_reverted: Counter,
    /// Writes of backport records before admitting a break-glass change, by result.
    pub ledger_writes: Family<ResultLabels, Counter>,
    /// Open connections on the webhook port.
    pub webhook_connections_open: Gauge,
    /// Connections closed at once because --max-connections were open.
    pub webhook_connections_refused: Counter,
    /// 1 when the webhook port requires a client certificate (`serve --client-ca-file`).
    pub webhook_client_auth: Gauge,
    /// Handshakes refused for their client certificate, by reason (`missing`, `untrusted`,
    /// `name`).
    pub webhook_client_certificates_refused: Family<ReasonLabels, Counter>,
    /// Bytes of request bodies reserved under --max-body-bytes-in-flight.
    pub webhook_body_bytes_in_flight: Gauge,
    /// Requests answered 503 because the body budget stayed full.
    pub webhook_body_budget_refused: Counter,
    /// Runtime mode: when the certificate this replica serves expires (Unix time).
    pub serving_certificate_expiry: Gauge<f64, AtomicU64>,
    /// Runtime mode: serving certificates this replica switched to after its first.
    pub certificate_rotations: Counter,
    /// Runtime mode: writes of the webhook configuration's caBundle, by result.
    pub ca_bundle_writes: Family<ResultLabels, Counter>,
    /// Namespaces the gate webhook's namespaceSelector last written by this replica excludes.
    pub webhook_selector_excluded_namespaces: Gauge,
    /// Writes of the gate webhook's namespaceSelector, by result.
    pub webhook_selector_writes: Family<ResultLabels, Counter>,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge,
    /// When each policy's GitOps controller last wrote (Unix time): the later of what this
    /// replica saw and what the shared records hold; absent until either has a write.
    pub controller_last_write: Family<ControllerLabels, Gauge<f64, AtomicU64>>,
    /// Syncs with the controllers' last-write records (Leases), by result.
    pub controller_silence_records: Family<ResultLabels, Counter>,
    /// Server-side applies of namespaces' PolicyReports (`serve --policy-reports`), by result.
    pub policy_report_writes: Family<ResultLabels, Counter>,
    /// Log lines dropped because the log writer's queue was full (`serve`'s non-blocking writer).
    pub log_lines_dropped: LogLinesDropped,
}

/// `driftgate_log_lines_dropped_total`, read at each scrape from the counter of the log writer
/// that `serve` logs through; 0 until one is attached (nothing else drops lines).
#[derive(Clone, Debug, Default)]
pub struct LogLinesDropped(Arc<OnceLock<crate::log_queue::DroppedLines>>);

impl LogLinesDropped {
    /// Reports `counter` from now on; the first attached stays (there is one log writer).
    pub fn attach(&self, counter: crate::log_queue::DroppedLines) {
        let _ = self.0.set(counter);
    }

    pub fn get(&self) -> u64 {
        self.0.get().map_or(0, |counter| counter.get() as u64)
    }
}

impl Collector for LogLinesDropped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(self.get());
        let metric = encoder.encode_descriptor(
            "log_lines_dropped",
            "Log lines dropped because the log writer's queue was full (stderr written slower than lines came)",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut metrics = Metrics::unregistered();
        // The order of registration is the order of `/metrics`: keep it.
        metrics.register_reviews();
        metrics.register_windows();
        metrics.register_events();
        metrics.register_reloads();
        metrics.register_cluster_reads();
        metrics.register_build_info();
        metrics.register_ledger();
        metrics.register_connections();
        metrics.register_certificates();
        metrics.register_webhook_configuration();
        metrics.register_controllers();
        metrics.register_policy_reports();
        metrics
            .registry
            .register_collector(Box::new(metrics.log_lines_dropped.clone()));
        metrics.create_series_alerts_read();
        metrics
    }

    /// Every metric at its start, none registered yet.
    fn unregistered() -> Self {
        Metrics {
            registry: Registry::with_prefix("driftgate"),
            reviews: Family::default(),
            review_duration: review_duration_histogram(),
            break_glass_windows_open: Gauge::default(),
            suspensions: Family::default(),
            break_glass_labels_expired: Family::default(),
            suspension_resumes: Family::default(),
            events_published: Family::default(),
            events_dropped: Family::default(),
            policy_reloads: Family::default(),
            policy_last_reload: Gauge::default(),
            policy_valid: Family::default(),
            tls_reloads: Family::default(),
            parent_lookups: Family::default(),
            namespace_cache_ready: Gauge::default(),
            build_info: Family::default(),
            backport_pending: Gauge::default(),
            backport_oldest_pending_seconds: Gauge::default(),
            backport_oldest_unlinked_seconds: Gauge::default(),
            backport_oldest_linked_seconds: Gauge::default(),
            emergency_changes_reverted: Counter::default(),
            ledger_writes: Family::default(),
            webhook_connections_open: Gauge::default(),
            webhook_connections_refused: Counter::default(),
            webhook_client_auth: Gauge::default(),
            webhook_client_certificates_refused: Family::default(),
            webhook_body_bytes_in_flight: Gauge::default(),
            webhook_body_budget_refused: Counter::default(),
            serving_certificate_expiry: Gauge::default(),
            certificate_rotations: Counter::default(),
            ca_bundle_writes: Family::default(),
            webhook_selector_excluded_namespaces: Gauge::default(),
            webhook_selector_writes: Family::default(),
            leader: Gauge::default(),
            controller_last_write: Family::default(),
            controller_silence_records: Family::default(),
            policy_report_writes: Family::default(),
            log_lines_dropped: LogLinesDropped::default(),
        }
    }

    /// Admission reviews: how many, and how long each took.
    fn register_reviews(&mut self) {
        self.registry.register(
            "admission_reviews",
            "Admission reviews answered, by decision, rule, policy and operation",
            self.reviews.clone(),
        );
        self.registry.register(
            "admission_duration_seconds",
            "Time from a review's body being read to its answer",
            self.review_duration.clone(),
        );
    }

    /// Break-glass windows and the suspensions they open.
    fn register_windows(&mut self) {
        self.registry.register(
            "break_glass_windows_open",
            "Break-glass windows known to be open (namespaces, and objects seen in recent decisions)",
            self.break_glass_windows_open.clone(),
        );
        self.registry.register(
            "suspensions",
            "GitOps objects whose reconciliation is suspended, by policy and state: open (before its expiry), expired (past it, nobody resumed it), unbounded (no expiry label)",
            self.suspensions.clone(),
        );
        self.registry.register(
            "break_glass_labels_expired",
            "Objects whose break-glass label is past its expiry as last reviewed (the window ended; the label was never removed), by policy",
            self.break_glass_labels_expired.clone(),
        );
        self.registry.register(
            "suspension_resumes",
            "Suspensions past their expiry that driftgate resumed itself (--resume-expired-suspensions), by policy and result: success, conflict (changed since read; retried next round), failure, not_undoable (left alone)",
            self.suspension_resumes.clone(),
        );
    }

    /// Kubernetes Events: published and dropped.
    fn register_events(&mut self) {
        self.registry.register(
            "events_published",
            "Kubernetes Events published, by reason",
            self.events_published.clone(),
        );
        self.registry.register(
            "events_dropped",
            "Kubernetes Events dropped, by why (queue_full, api_error, shutdown)",
            self.events_dropped.clone(),
        );
    }

    /// Reloads of what `serve` reads from files: the policies, then the certificates.
    fn register_reloads(&mut self) {
        self.registry.register(
            "policy_reloads",
            "Policy reloads, by result; a failed reload keeps the last good policy",
            self.policy_reloads.clone(),
        );
        self.registry.register(
            "policy_last_reload_timestamp_seconds",
            "Unix time of the last successful policy load",
            self.policy_last_reload.clone(),
        );
        self.registry.register(
            "policy_valid",
            "1 while the policy source's current content is valid, 0 while it is refused (the last good policy, if any, keeps serving)",
            self.policy_valid.clone(),
        );
        // 0 until the first load says otherwise: an alert on 0 must not miss a bad start.
        let _ = self.policy_valid.get_or_create(&SourceLabels {
            source: FILE_SOURCE.to_owned(),
        });
        self.registry.register(
            "tls_reloads",
            "Serving certificate and client CA reloads, by result; a failed reload keeps the old ones",
            self.tls_reloads.clone(),
        );
    }

    /// What reviews read from the cluster: parent objects, and the namespace cache.
    fn register_cluster_reads(&mut self) {
        self.registry.register(
            "parent_lookups",
            "GETs of a subresource's parent object to read its break-glass window",
            self.parent_lookups.clone(),
        );
        self.registry.register(
            "namespace_cache_ready",
            "1 when the namespace cache is synced and trusted, else 0",
            self.namespace_cache_ready.clone(),
        );
    }

    fn register_build_info(&mut self) {
        self.registry
            .register("build_info", "Build information", self.build_info.clone());
        self.build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
    }

    /// The backport ledger: records awaiting backport, and their writes.
    fn register_ledger(&mut self) {
        self.registry.register(
            "backport_pending",
            "Backport records awaiting backport to Git (window ended, controller not yet seen)",
            self.backport_pending.clone(),
        );
        self.registry.register(
            "backport_oldest_pending_seconds",
            "Age of the oldest record awaiting backport, since its window ended",
            self.backport_oldest_pending_seconds.clone(),
        );
        self.registry.register(
            "backport_oldest_unlinked_seconds",
            "Age of the oldest record awaiting backport with no pull request linked, since its window ended",
            self.backport_oldest_unlinked_seconds.clone(),
        );
        self.registry.register(
            "backport_oldest_linked_seconds",
            "Age of the oldest record awaiting backport whose pull request is linked but not yet reconciled, since its window ended",
            self.backport_oldest_linked_seconds.clone(),
        );
        self.registry.register(
            "emergency_changes_reverted",
            "Controller writes that undid a recorded emergency change",
            self.emergency_changes_reverted.clone(),
        );
        self.registry.register(
            "ledger_writes",
            "Backport record writes made before admitting a break-glass change, by result",
            self.ledger_writes.clone(),
        );
    }

    /// The webhook port: its connections, their client certificates, and the body budget.
    fn register_connections(&mut self) {
        self.registry.register(
            "webhook_connections_open",
            "Open connections on the webhook port",
            self.webhook_connections_open.clone(),
        );
        self.registry.register(
            "webhook_client_auth",
            "1 when the webhook port requires a client certificate from its callers (serve --client-ca-file), else 0",
            self.webhook_client_auth.clone(),
        );
        self.registry.register(
            "webhook_client_certificates_refused",
            "TLS handshakes on the webhook port refused for the caller's client certificate, by reason: missing, untrusted (not from a client CA), name (none of the expected names)",
            self.webhook_client_certificates_refused.clone(),
        );
        for refusal in ClientCertRefusal::ALL {
            let _ = self
                .webhook_client_certificates_refused
                .get_or_create(&ReasonLabels {
                    reason: refusal.label().to_owned(),
                });
        }
        self.registry.register(
            "webhook_connections_refused",
            "Connections to the webhook port closed at once because --max-connections were open",
            self.webhook_connections_refused.clone(),
        );
        self.registry.register(
            "webhook_body_bytes_in_flight",
            "Bytes of request bodies being read or reviewed, reserved under --max-body-bytes-in-flight",
            self.webhook_body_bytes_in_flight.clone(),
        );
        self.registry.register(
            "webhook_body_budget_refused",
            "Requests answered 503 because --max-body-bytes-in-flight stayed reserved by others",
            self.webhook_body_budget_refused.clone(),
        );
    }

    /// Runtime certificates: the serving certificate and the caBundle.
    fn register_certificates(&mut self) {
        self.registry.register(
            "serving_certificate_expiry_timestamp_seconds",
            "Runtime certificates: Unix time at which the serving certificate this replica serves expires (0 in file mode)",
            self.serving_certificate_expiry.clone(),
        );
        self.registry.register(
            "certificate_rotations",
            "Runtime certificates: serving certificates this replica switched to from the Secret, after its first",
            self.certificate_rotations.clone(),
        );
        self.registry.register(
            "ca_bundle_writes",
            "Runtime certificates: writes of the webhook configuration's caBundle, by result",
            self.ca_bundle_writes.clone(),
        );
    }

    /// The gate webhook's namespaceSelector, and the Lease that says who writes it.
    fn register_webhook_configuration(&mut self) {
        self.registry.register(
            "webhook_selector_excluded_namespaces",
            "Namespaces that no policy guards, excluded from the gate webhook by the namespaceSelector this replica last wrote",
            self.webhook_selector_excluded_namespaces.clone(),
        );
        self.registry.register(
            "webhook_selector_writes",
            "Server-side applies of the gate webhook's namespaceSelector, by result",
            self.webhook_selector_writes.clone(),
        );
        self.registry.register(
            "leader",
            "1 while this replica holds the leader Lease (only the leader writes the webhook configuration)",
            self.leader.clone(),
        );
    }

    /// The GitOps controllers' last writes, and their shared records.
    fn register_controllers(&mut self) {
        self.registry.register(
            "controller_last_write_timestamp_seconds",
            "Unix time of the last write (dry runs included) of each policy's GitOps controller, as this replica saw it or the shared records (Leases) hold it; absent until either has one",
            self.controller_last_write.clone(),
        );
        self.registry.register(
            "controller_silence_record_syncs",
            "Reads and writes of the controllers' last-write records (Leases in driftgate's namespace), by result",
            self.controller_silence_records.clone(),
        );
    }

    fn register_policy_reports(&mut self) {
        self.registry.register(
            "policy_report_writes",
            "Server-side applies of a namespace's PolicyReport (serve --policy-reports; only changed reports are written), by result",
            self.policy_report_writes.clone(),
        );
    }

    /// Series that alerts read exist from the start, at zero, rather than appearing on first use.
    fn create_series_alerts_read(&self) {
        for family in [
            &self.ca_bundle_writes,
            &self.policy_reloads,
            &self.tls_reloads,
            &self.parent_lookups,
            &self.ledger_writes,
            &self.webhook_selector_writes,
            &self.controller_silence_records,
            &self.policy_report_writes,
        ] {
            for result in ["success", "failure"] {
                let _ = family.get_or_create(&ResultLabels {
                    result: result.to_owned(),
                });
            }
        }
        for reason in ["queue_full", "api_error"] {
            let _ = self.events_dropped.get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            });
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Sets `driftgate_policy_valid{source}`.
    pub fn set_policy_valid(&self, source: &str, valid: bool) {
        self.policy_valid
            .get_or_create(&SourceLabels {
                source: source.to_owned(),
            })
            .set(i64::from(valid));
    }

    /// Sets `driftgate_controller_last_write_timestamp_seconds{policy, controller}`.
    pub fn set_controller_last_write(&self, key: &ControllerKey, at: Timestamp) {
        self.controller_last_write
            .get_or_create(&controller_labels(key))
            .set(at.as_millisecond() as f64 / 1000.0);
    }

    /// Removes the series of a controller no longer configured.
    pub fn forget_controller(&self, key: &ControllerKey) {
        self.controller_last_write.remove(&controller_labels(key));
    }

    pub fn count_result(family: &Family<ResultLabels, Counter>, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        family
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }
}

/// Sub-millisecond buckets: a decision takes microseconds, and the API server's budget for the
/// whole call is seconds.
fn review_duration_histogram() -> Histogram {
    Histogram::new([
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
        0.5, 1.0, 2.5,
    ])
}

fn controller_labels(key: &ControllerKey) -> ControllerLabels {
    ControllerLabels {
        policy: key.policy.clone(),
        controller: key.controller.clone(),
    }
}

/// Why a caller was refused at the handshake: the `reason` label of
/// `driftgate_webhook_client_certificates_refused_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCertRefusal {
    /// No client certificate at all.
    Missing,
    /// A certificate that does not verify against the client CAs (another CA, expired, not for
    /// client authentication).
    Untrusted,
    /// A certificate from a client CA that names none of the expected names.
    Name,
}

impl ClientCertRefusal {
    pub const ALL: [ClientCertRefusal; 3] = [
        ClientCertRefusal::Missing,
        ClientCertRefusal::Untrusted,
        ClientCertRefusal::Name,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ClientCertRefusal::Missing => "missing",
            ClientCertRefusal::Untrusted => "untrusted",
            ClientCertRefusal::Name => "name",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_every_metric_with_its_prefix() {
        let metrics = Metrics::new();
        Metrics::count_result(&metrics.policy_reloads, false);
        metrics
            .reviews
            .get_or_create(&ReviewLabels {
                decision: "denied".into(),
                rule: "NotPermitted".into(),
                policy: "production".into(),
                operation: "UPDATE".into(),
            })
            .inc();
        let text = metrics.encode();
        for name in [
            "driftgate_admission_reviews_total{decision=\"denied\",rule=\"NotPermitted\",policy=\"production\",operation=\"UPDATE\"} 1",
            "driftgate_admission_duration_seconds_bucket{le=\"0.0001\"}",
            "driftgate_policy_reloads_total{result=\"failure\"} 1",
            "driftgate_build_info{version=",
            "driftgate_policy_last_reload_timestamp_seconds",
            "driftgate_tls_reloads_total{result=\"success\"} 0",
            "driftgate_events_dropped_total{reason=\"queue_full\"} 0",
            "driftgate_break_glass_windows_open",
            "driftgate_policy_valid{source=\"file\"} 0",
            "driftgate_webhook_selector_writes_total{result=\"failure\"} 0",
            "driftgate_webhook_selector_excluded_namespaces 0",
            "driftgate_leader 0",
            "driftgate_log_lines_dropped_total 0",
            "driftgate_webhook_client_auth 0",
            "driftgate_webhook_client_certificates_refused_total{reason=\"missing\"} 0",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }

    #[test]
    fn dropped_log_lines_are_read_from_the_writer_at_each_scrape() {
        use std::io::Write;
        let metrics = Metrics::new();
        let (release, stalled) = std::sync::mpsc::channel();
        // The log writer's thread blocks on its first batch, its queue fills, and the lines
        // after are dropped.
        let (mut writer, guard) = crate::log_queue::LogQueue::start(
            crate::log_queue::tests::Stalled(stalled),
            1,
            std::time::Duration::from_secs(3600),
            "test-log",
        )
        .unwrap();
        metrics.log_lines_dropped.attach(writer.dropped());
        for _ in 0..10 {
            writer.write_all(b"review\n").unwrap();
        }
        // The first line wakes the writer, which stalls on it: one more line is queued if it
        // took the first before the second came, none if after; the rest are dropped.
        let dropped = writer.dropped().get();
        assert!((8..=9).contains(&dropped), "{dropped}");
        let text = metrics.encode();
        assert!(
            text.contains(&format!("driftgate_log_lines_dropped_total {dropped}\n")),
            "{text}"
        );
        drop(release);
        drop(guard);
    }
}
