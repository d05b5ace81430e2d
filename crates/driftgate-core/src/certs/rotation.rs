//! Runtime certificates, the pure part: what the Secret holds, and the next step of a rotation.
//!
//! Zero failed reviews depends on the order of the steps, one at a time:
//! 1. a new CA and serving certificate are generated and kept aside (`next-*` keys);
//! 2. the caBundle of every configured webhook is written to trust both CAs;
//! 3. once the live bundle holds the new CA, the time is recorded (`next-trusted-at`);
//! 4. after the settle time (the API server's informer catching up), the new pair becomes the
//!    one served, and the old CA is kept as `retired-ca.crt` (`promoted-at`);
//! 5. after the settle time again (every replica has swapped to the new certificate, which it
//!    reads from the same Secret), the old CA leaves the Secret and then the bundle.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const NEXT_CA_CERT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
pub const NEXT_TLS_CERT: &str = "next-tls.crt";
pub const NEXT_TLS_KEY: &str = "next-tls.key";
pub const NEXT_TRUSTED_AT: &str = "next-trusted-at";
pub const RETIRED_CA_CERT: &str = "retired-ca.crt";
pub const PROMOTED_AT: &str = "promoted-at";

/// One CA and the serving certificate it signed, as PEM, with what the plan needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA certificate's DER: bundles are compared by it.
    pub ca_der: Vec<u8>,
    pub not_after: Timestamp,
    /// The serving certificate's serial number, hex.
    pub serial: String,
}

/// A generation waiting for the bundle to trust its CA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub generation: Generation,
    /// When the live bundle was first seen holding its CA.
    pub trusted_at: Option<Timestamp>,
}

/// The CA of the generation served before the current one, trusted until nothing serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    pub ca_cert_pem: String,
    pub ca_der: Vec<u8>,
    pub promoted_at: Timestamp,
}

/// What the Secret holds, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub current: Generation,
    pub next: Option<Pending>,
    pub retired: Option<Retired>,
}

/// Why the Secret's contents cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoredError {
    #[error("key {key} is missing")]
    Missing { key: &'static str },
    #[error("key {key} is not text (PEM or an RFC 3339 time)")]
    NotText { key: &'static str },
    #[error("key {key} does not hold one PEM certificate: {reason}")]
    BadCertificate { key: &'static str, reason: String },
    #[error("key {cert} was not issued by the CA in key {ca}")]
    WrongIssuer {
        cert: &'static str,
        ca: &'static str,
    },
    #[error("keys {cert} and {key} are not a usable serving pair: {reason}")]
    BadPair {
        cert: &'static str,
        key: &'static str,
        reason: String,
    },
    #[error("key {key} is not an RFC 3339 time: {value:?}")]
    BadTime { key: &'static str, value: String },
}

/// Why the Secret is replaced by a fresh CA and certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegenerateReason {
    Unusable(StoredError),
    Expired { at: Timestamp },
}

impl fmt::Display for RegenerateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegenerateReason::Unusable(e) => write!(f, "its contents cannot be used ({e})"),
            RegenerateReason::Expired { at } => {
                write!(
                    f,
                    "its serving certificate expired at {at} with no successor"
                )
            }
        }
    }
}

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No Secret: create it with a fresh generation.
    Create,
    /// Replace the Secret with a fresh generation; reviews fail until the bundle trusts it.
    Regenerate(RegenerateReason),
    /// Make every configured webhook's caBundle these CAs (PEM), in this order.
    WriteBundle(Vec<String>),
    /// Keep a fresh generation aside as `next`.
    StartRotation,
    /// Record that the live bundle trusts the next CA, as of now.
    MarkTrusted,
    /// Serve the next generation; keep the old CA as retired.
    Promote,
    /// Drop the retired CA.
    Retire,
    /// Nothing to do before then (or before the Secret or bundle change).
    Wait { until: Timestamp },
}

/// The durations that order a rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Start a rotation this long before the serving certificate expires.
    pub renew_before: SignedDuration,
    /// How long a change must have been live before the next step relies on it.
    pub settle: SignedDuration,
}

impl Stored {
    /// The CAs the bundle must hold now: the current, the next, the retired.
    pub fn wanted_bundle(&self) -> Vec<(&str, &[u8])> {
        let mut wanted = vec![(
            self.current.ca_cert_pem.as_str(),
            self.current.ca_der.as_slice(),
        )];
        if let Some(next) = &self.next {
            wanted.push((
                next.generation.ca_cert_pem.as_str(),
                next.generation.ca_der.as_slice(),
            ));
        }
        if let Some(retired) = &self.retired {
            wanted.push((retired.ca_cert_pem.as_str(), retired.ca_der.as_slice()));
        }
        wanted
    }
}

/// The next step, given the time, what the Secret holds (None: there is none) and the CAs
/// (DER) each configured webhook's live caBundle holds.
pub fn plan(
    now: Timestamp,
    stored: Option<&Result<Stored, StoredError>>,
    live: &[BTreeSet<Vec<u8>>],
    timing: Timing,
) -> Step {
    let stored = match stored {
        None => return Step::Create,
        Some(Err(e)) => return Step::Regenerate(RegenerateReason::Unusable(e.clone())),
        Some(Ok(stored)) => stored,
    };
    if now >= stored.current.not_after {
        // A trusted successor is better than a new CA nobody trusts yet.
        return match &stored.next {
            Some(next) if next.trusted_at.is_some() && now < next.generation.not_after => {
                Step::Promote
            }
            _ => Step::Regenerate(RegenerateReason::Expired {
                at: stored.current.not_after,
            }),
        };
    }
    let wanted = stored.wanted_bundle();
    let wanted_set: BTreeSet<Vec<u8>> = wanted.iter().map(|(_, der)| der.to_vec()).collect();
    if live.iter().any(|bundle| *bundle != wanted_set) {
        return Step::WriteBundle(wanted.iter().map(|(pem, _)| (*pem).to_owned()).collect());
    }
    if let Some(next) = &stored.next {
        return match next.trusted_at {
            None => Step::MarkTrusted,
            // Written by a replica whose clock is ahead: measure from our own clock instead.
            Some(at) if at > now + timing.settle => Step::MarkTrusted,
            Some(at) if now >= at + timing.settle => Step::Promote,
            Some(at) => Step::Wait {
                until: at + timing.settle,
            },
        };
    }
    if let Some(retired) = &stored.retired {
        let at = retired.promoted_at;
        // From a clock far ahead, waiting for it would keep the old CA trusted for that long.
        if now >= at + timing.settle || at > now + timing.settle {
            return Step::Retire;
        }
        return Step::Wait {
            until: at + timing.settle,
        };
    }
    let renew_at = stored.current.not_after - timing.renew_before;
    if now >= renew_at {
        Step::StartRotation
    } else {
        Step::Wait { until: renew_at }
    }
}

/// What the Secret holds after `step` (one that writes it), made `now`; `fresh` is the new
/// generation that [`Step::Create`], [`Step::Regenerate`] and [`Step::StartRotation`] need.
pub fn after(
    stored: Option<Stored>,
    step: &Step,
    now: Timestamp,
    fresh: Option<Generation>,
) -> Option<Stored> {
    match (step, stored) {
        (Step::Create | Step::Regenerate(_), _) => fresh.map(|current| Stored {
            current,
            next: None,
            retired: None,
        }),
        (Step::StartRotation, Some(stored)) => fresh.map(|generation| Stored {
            next: Some(Pending {
                generation,
                trusted_at: None,
            }),
            ..stored
        }),
        (Step::MarkTrusted, Some(mut stored)) => {
            let next = stored.next.as_mut()?;
            next.trusted_at = Some(now);
            Some(stored)
        }
        (Step::Promote, Some(stored)) => {
            let next = stored.next?;
            Some(Stored {
                retired: Some(Retired {
                    ca_cert_pem: stored.current.ca_cert_pem,
                    ca_der: stored.current.ca_der,
                    promoted_at: now,
                }),
                current: next.generation,
                next: None,
            })
        }
        (Step::Retire, Some(stored)) => Some(Stored {
            retired: None,
            ..stored
        }),
        _ => None,
    }
}

/// The Secret's `data`, as text.
pub fn to_data(stored: &Stored) -> BTreeMap<String, String> {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_owned(), value.to_owned());
    };
    let current = &stored.current;
    put(CA_CERT, &current.ca_cert_pem);
    put(CA_KEY, &current.ca_key_pem);
    put(TLS_CERT, &current.cert_pem);
    put(TLS_KEY, &current.key_pem);
    if let Some(next) = &stored.next {
        let generation = &next.generation;
        put(NEXT_CA_CERT, &generation.ca_cert_pem);
        put(NEXT_CA_KEY, &generation.ca_key_pem);
        put(NEXT_TLS_CERT, &generation.cert_pem);
        put(NEXT_TLS_KEY, &generation.key_pem);
        if let Some(at) = next.trusted_at {
            put(NEXT_TRUSTED_AT, &at.to_string());
        }
    }
    if let Some(retired) = &stored.retired {
        put(RETIRED_CA_CERT, &retired.ca_cert_pem);
        put(PROMOTED_AT, &retired.promoted_at.to_string());
    }
    data
}

/// Reads the Secret's `data` back, checking every certificate and pair.
pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Stored, StoredError> {
    let current = generation(data, [CA_CERT, CA_KEY, TLS_CERT, TLS_KEY])?;
    let next = if data.contains_key(NEXT_TLS_CERT) || data.contains_key(NEXT_CA_CERT) {
        Some(Pending {
            generation: generation(
                data,
                [NEXT_CA_CERT, NEXT_CA_KEY, NEXT_TLS_CERT, NEXT_TLS_KEY],
            )?,
            trusted_at: optional_time(data, NEXT_TRUSTED_AT)?,
        })
    } else {
        None
    };
    let retired = match data.get(RETIRED_CA_CERT) {
        None => None,
        Some(_) => {
            let pem = text(data, RETIRED_CA_CERT)?;
            let ca = parse_cert(RETIRED_CA_CERT, pem)?;
            Some(Retired {
                ca_cert_pem: pem.to_owned(),
                ca_der: ca.der,
                promoted_at: optional_time(data, PROMOTED_AT)?
                    .ok_or(StoredError::Missing { key: PROMOTED_AT })?,
            })
        }
    };
    Ok(Stored {
        current,
        next,
        retired,
    })
}

fn text<'a>(
    data: &'a BTreeMap<String, Vec<u8>>,
    key: &'static str,
) -> Result<&'a str, StoredError> {
    let bytes = data.get(key).ok_or(StoredError::Missing { key })?;
    std::str::from_utf8(bytes).map_err(|_| StoredError::NotText { key })
}

fn optional_time(
    data: &BTreeMap<String, Vec<u8>>,
    key: &'static str,
) -> Result<Option<Timestamp>, StoredError> {
    if !data.contains_key(key) {
        return Ok(None);
    }
    let value = text(data, key)?;
    value
        .trim()
        .parse()
        .map(Some)
        .map_err(|_| StoredError::BadTime {
            key,
            value: value.to_owned(),
        })
}

/// The parts of a certificate the plan reads.
struct ParsedCert {
    der: Vec<u8>,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    not_after: Timestamp,
    serial: String,
}

fn parse_cert(key: &'static str, pem: &str) -> Result<ParsedCert, StoredError> {
    let bad = |reason: String| StoredError::BadCertificate { key, reason };
    let mut ders = Vec::new();
    for item in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        ders.push(item.map_err(|e| {
            bad(format!(
                "not valid PEM ({})",
                crate::certs::pem::pem_problem(&e)
            ))
        })?);
    }
    let der = match ders.as_slice() {
        [one] => one.to_vec(),
        [] => return Err(bad("no -----BEGIN CERTIFICATE----- block".to_owned())),
        more => return Err(bad(format!("{} certificates", more.len()))),
    };
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| bad(format!("not a valid X.509 certificate: {e}")))?;
    let not_after = Timestamp::from_second(cert.validity().not_after.timestamp())
        .map_err(|e| bad(format!("its expiry is out of range: {e}")))?;
    Ok(ParsedCert {
        subject: cert.subject().as_raw().to_vec(),
        issuer: cert.issuer().as_raw().to_vec(),
        serial: cert.raw_serial_as_string(),
        not_after,
        der: der.clone(),
    })
}

/// Reads one generation from its four keys: CA certificate, CA key, serving certificate, key.
fn generation(
    data: &BTreeMap<String, Vec<u8>>,
    [ca_cert, ca_key, cert, key]: [&'static str; 4],
) -> Result<Generation, StoredError> {
    let ca_pem = text(data, ca_cert)?;
    let ca = parse_cert(ca_cert, ca_pem)?;
    let cert_pem = text(data, cert)?;
    let serving = parse_cert(cert, cert_pem)?;
    if serving.issuer != ca.subject {
        return Err(StoredError::WrongIssuer { cert, ca: ca_cert });
    }
    let key_pem = text(data, key)?;
    let labels = crate::certs::pem::TlsFiles {
        cert: cert.into(),
        key: key.into(),
    };
    crate::certs::pem::certified_key_from_pem(&labels, cert_pem.as_bytes(), key_pem.as_bytes())
        .map_err(|e| StoredError::BadPair {
            cert,
            key,
            reason: e.to_string(),
        })?;
    let ca_key_pem = text(data, ca_key)?;
    rcgen::KeyPair::from_pem(ca_key_pem).map_err(|e| StoredError::BadPair {
        cert: ca_cert,
        key: ca_key,
        reason: format!("not a usable private key: {e}"),
    })?;
    Ok(Generation {
        ca_cert_pem: ca_pem.to_owned(),
        ca_key_pem: ca_key_pem.to_owned(),
        cert_pem: cert_pem.to_owned(),
        key_pem: key_pem.to_owned(),
        ca_der: ca.der,
        not_after: serving.not_after,
        serial: serving.serial,
    })
}

/// Reads a generation from its four PEMs, checked as [`from_data`] checks the Secret's.
pub fn generation_from_pem(
    ca_cert: &str,
    ca_key: &str,
    cert: &str,
    key: &str,
) -> Result<Generation, StoredError> {
    let data: BTreeMap<String, Vec<u8>> = [
        (CA_CERT, ca_cert),
        (CA_KEY, ca_key),
        (TLS_CERT, cert),
        (TLS_KEY, key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
    .collect();
    generation(&data, [CA_CERT, CA_KEY, TLS_CERT, TLS_KEY])
}

/// The CAs (DER) in a caBundle (PEM); what does not parse is left out, which makes the bundle
/// differ from the wanted one and so gets it rewritten.
pub fn bundle_cas(pem: &[u8]) -> BTreeSet<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(|item| item.ok().map(|der| der.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        renew_before: SignedDuration::from_secs(25),
        settle: SignedDuration::from_secs(3),
    };

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("in range")
    }

    fn issue(at: Timestamp) -> Generation {
        crate::certs::issue_generation(
            at,
            std::time::Duration::from_secs(40),
            &["driftgate.driftgate.svc".to_owned()],
        )
        .expect("a generation is issued")
    }

    fn fresh(at: Timestamp) -> Stored {
        Stored {
            current: issue(at),
            next: None,
            retired: None,
        }
    }

    fn trusting(cas: &[&Generation]) -> Vec<BTreeSet<Vec<u8>>> {
        vec![cas.iter().map(|g| g.ca_der.clone()).collect()]
    }

    fn bytes(data: BTreeMap<String, String>) -> BTreeMap<String, Vec<u8>> {
        data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect()
    }

    #[test]
    fn no_secret_is_created() {
        assert_eq!(plan(t(0), None, &[], TIMING), Step::Create);
    }

    #[test]
    fn a_new_ca_is_written_to_the_bundle_then_nothing_until_renewal() {
        let stored = fresh(t(0));
        let step = plan(t(1), Some(&Ok(stored.clone())), &[BTreeSet::new()], TIMING);
        assert_eq!(
            step,
            Step::WriteBundle(vec![stored.current.ca_cert_pem.clone()])
        );
        let step = plan(
            t(1),
            Some(&Ok(stored.clone())),
            &trusting(&[&stored.current]),
            TIMING,
        );
        assert_eq!(step, Step::Wait { until: t(40 - 25) });
        // Every configured webhook must trust it, not just one.
        let mut two = trusting(&[&stored.current]);
        two.push(BTreeSet::new());
        assert!(matches!(
            plan(t(1), Some(&Ok(stored)), &two, TIMING),
            Step::WriteBundle(_)
        ));
    }

    #[test]
    fn a_rotation_adds_the_new_ca_first_and_serves_its_certificate_only_after_it_settled() {
        let old = fresh(t(0));
        let live_old = trusting(&[&old.current]);
        assert_eq!(
            plan(t(15), Some(&Ok(old.clone())), &live_old, TIMING),
            Step::StartRotation
        );
        let started = after(
            Some(old.clone()),
            &Step::StartRotation,
            t(15),
            Some(issue(t(15))),
        )
        .unwrap();
        assert_eq!(
            started.current, old.current,
            "still serving the old certificate"
        );
        let new = started.next.clone().unwrap().generation;

        let step = plan(t(15), Some(&Ok(started.clone())), &live_old, TIMING);
        assert_eq!(
            step,
            Step::WriteBundle(vec![
                old.current.ca_cert_pem.clone(),
                new.ca_cert_pem.clone()
            ])
        );
        let live_both = trusting(&[&old.current, &new]);
        assert_eq!(
            plan(t(16), Some(&Ok(started.clone())), &live_both, TIMING),
            Step::MarkTrusted
        );
        let trusted = after(Some(started), &Step::MarkTrusted, t(16), None).unwrap();
        assert_eq!(trusted.next.as_ref().unwrap().trusted_at, Some(t(16)));
        assert_eq!(
            plan(t(18), Some(&Ok(trusted.clone())), &live_both, TIMING),
            Step::Wait { until: t(19) }
        );
        assert_eq!(
            plan(t(19), Some(&Ok(trusted.clone())), &live_both, TIMING),
            Step::Promote
        );

        let promoted = after(Some(trusted), &Step::Promote, t(19), None).unwrap();
        assert_eq!(promoted.current, new);
        assert_eq!(
            promoted.retired.as_ref().unwrap().ca_der,
            old.current.ca_der
        );
        // The old CA stays trusted while replicas may still serve the old certificate.
        assert_eq!(
            plan(t(20), Some(&Ok(promoted.clone())), &live_both, TIMING),
            Step::Wait { until: t(22) }
        );
        assert_eq!(
            plan(t(22), Some(&Ok(promoted.clone())), &live_both, TIMING),
            Step::Retire
        );
        let retired = after(Some(promoted), &Step::Retire, t(22), None).unwrap();
        assert_eq!(
            plan(t(22), Some(&Ok(retired.clone())), &live_both, TIMING),
            Step::WriteBundle(vec![new.ca_cert_pem.clone()])
        );
        assert_eq!(
            plan(t(23), Some(&Ok(retired)), &trusting(&[&new]), TIMING),
            Step::Wait {
                until: new.not_after - TIMING.renew_before
            }
        );
    }

    #[test]
    fn a_bundle_that_lost_the_new_ca_is_written_again_before_anything_else() {
        let old = fresh(t(0));
        let mut started = after(
            Some(old.clone()),
            &Step::StartRotation,
            t(15),
            Some(issue(t(15))),
        )
        .unwrap();
        started.next.as_mut().unwrap().trusted_at = Some(t(16));
        // Someone re-applied the configuration with only the old CA: no promotion on that.
        let step = plan(
            t(30),
            Some(&Ok(started)),
            &trusting(&[&old.current]),
            TIMING,
        );
        assert!(matches!(step, Step::WriteBundle(pems) if pems.len() == 2));
    }

    #[test]
    fn an_expired_certificate_is_replaced_by_its_trusted_successor_or_regenerated() {
        let old = fresh(t(0));
        assert_eq!(
            plan(
                t(41),
                Some(&Ok(old.clone())),
                &trusting(&[&old.current]),
                TIMING
            ),
            Step::Regenerate(RegenerateReason::Expired {
                at: old.current.not_after
            })
        );
        let mut started = after(
            Some(old.clone()),
            &Step::StartRotation,
            t(15),
            Some(issue(t(15))),
        )
        .unwrap();
        // Untrusted successor: regenerating is no worse, and starts clean.
        assert!(matches!(
            plan(t(41), Some(&Ok(started.clone())), &[], TIMING),
            Step::Regenerate(RegenerateReason::Expired { .. })
        ));
        started.next.as_mut().unwrap().trusted_at = Some(t(16));
        assert_eq!(plan(t(41), Some(&Ok(started)), &[], TIMING), Step::Promote);
        let text = RegenerateReason::Expired { at: t(40) }.to_string();
        assert!(text.contains("expired at 2027-01-15T08:00:40Z"), "{text}");
    }

    #[test]
    fn clocks_ahead_of_ours_neither_regenerate_nor_stall_the_rotation() {
        // Issued by a replica whose clock is a minute ahead: not yet valid by our clock.
        let ahead = fresh(t(60));
        assert_eq!(
            plan(
                t(0),
                Some(&Ok(ahead.clone())),
                &trusting(&[&ahead.current]),
                TIMING
            ),
            Step::Wait { until: t(60 + 15) }
        );
        let mut started = after(
            Some(ahead.clone()),
            &Step::StartRotation,
            t(75),
            Some(issue(t(75))),
        )
        .unwrap();
        let new = started.next.clone().unwrap().generation;
        started.next.as_mut().unwrap().trusted_at = Some(t(3600));
        let live = trusting(&[&ahead.current, &new]);
        assert_eq!(
            plan(t(76), Some(&Ok(started)), &live, TIMING),
            Step::MarkTrusted
        );
        let mut promoted = fresh(t(76));
        promoted.retired = Some(Retired {
            ca_cert_pem: ahead.current.ca_cert_pem.clone(),
            ca_der: ahead.current.ca_der.clone(),
            promoted_at: t(3600),
        });
        let live = trusting(&[&promoted.current, &ahead.current]);
        assert_eq!(
            plan(t(77), Some(&Ok(promoted)), &live, TIMING),
            Step::Retire
        );
    }

    #[test]
    fn the_secret_round_trips_through_its_data() {
        let old = fresh(t(0));
        let started = after(Some(old), &Step::StartRotation, t(15), Some(issue(t(15)))).unwrap();
        let trusted = after(Some(started), &Step::MarkTrusted, t(16), None).unwrap();
        assert_eq!(from_data(&bytes(to_data(&trusted))), Ok(trusted.clone()));
        let promoted = after(Some(trusted), &Step::Promote, t(19), None).unwrap();
        assert_eq!(from_data(&bytes(to_data(&promoted))), Ok(promoted));
    }

    #[test]
    fn a_secret_edited_by_hand_is_refused_with_a_sentence_and_regenerated() {
        let one = to_data(&fresh(t(0)));
        let other = to_data(&fresh(t(0)));
        let edit = |key: &str, value: &str| {
            let mut data = one.clone();
            data.insert(key.to_owned(), value.to_owned());
            from_data(&bytes(data)).unwrap_err().to_string()
        };
        assert_eq!(
            edit(TLS_CERT, "hello"),
            "key tls.crt does not hold one PEM certificate: no -----BEGIN CERTIFICATE----- block"
        );
        assert_eq!(
            edit(CA_CERT, &other[CA_CERT]),
            "key tls.crt was not issued by the CA in key ca.crt"
        );
        assert!(
            edit(TLS_KEY, &other[TLS_KEY])
                .starts_with("keys tls.crt and tls.key are not a usable serving pair: ")
        );
        assert!(edit(CA_KEY, "garbage").starts_with(
            "keys ca.crt and ca.key are not a usable serving pair: not a usable private key"
        ));
        let mut rotated = to_data(
            &after(
                Some(fresh(t(0))),
                &Step::StartRotation,
                t(15),
                Some(issue(t(15))),
            )
            .unwrap(),
        );
        rotated.insert(NEXT_TRUSTED_AT.to_owned(), "yesterday".to_owned());
        assert_eq!(
            from_data(&bytes(rotated)).unwrap_err().to_string(),
            "key next-trusted-at is not an RFC 3339 time: \"yesterday\""
        );
        let mut missing = one.clone();
        missing.remove(TLS_KEY);
        let error = from_data(&bytes(missing)).unwrap_err();
        assert_eq!(error.to_string(), "key tls.key is missing");
        assert_eq!(
            plan(t(0), Some(&Err(error.clone())), &[], TIMING),
            Step::Regenerate(RegenerateReason::Unusable(error))
        );
        let mut binary = bytes(one);
        binary.insert(TLS_CERT.to_owned(), vec![0xff, 0xfe]);
        assert_eq!(
            from_data(&binary).unwrap_err().to_string(),
            "key tls.crt is not text (PEM or an RFC 3339 time)"
        );
    }

    /// Runs the plan against a simulated API server whose webhook informer lags the bundle
    /// writes by `lag` (less than the settle time), across three rotations: the CA of the
    /// certificate served is always in the bundle the API server uses.
    #[test]
    fn across_rotations_the_served_certificate_is_always_trusted_by_the_lagging_api_server() {
        let lag = 2; // seconds, under TIMING.settle
        let mut stored: Option<Stored> = None;
        let mut written: Vec<(i64, BTreeSet<Vec<u8>>)> = Vec::new();
        let mut rotations = 0;
        let mut served: Option<Vec<u8>> = None;
        for second in 0..150 {
            let now = t(second);
            // What the API server's informer holds: the last write older than `lag`.
            let seen = written
                .iter()
                .rev()
                .find(|(at, _)| *at + lag <= second)
                .map(|(_, b)| b.clone());
            if let (Some(ca), Some(seen)) = (&served, &seen) {
                assert!(
                    seen.contains(ca),
                    "at {second}s the served CA is not in the API server's bundle"
                );
            }
            let live: Vec<BTreeSet<Vec<u8>>> =
                vec![written.last().map(|(_, b)| b.clone()).unwrap_or_default()];
            let step = plan(now, stored.clone().map(Ok).as_ref(), &live, TIMING);
            match &step {
                Step::Wait { .. } => {}
                Step::WriteBundle(pems) => {
                    written.push((
                        second,
                        pems.iter().flat_map(|p| bundle_cas(p.as_bytes())).collect(),
                    ));
                }
                Step::Regenerate(reason) => panic!("regenerated at {second}s: {reason}"),
                _ => {
                    let fresh =
                        matches!(step, Step::Create | Step::StartRotation).then(|| issue(now));
                    rotations += usize::from(step == Step::Promote);
                    stored = after(stored.clone(), &step, now, fresh);
                }
            }
            // Replicas serve the Secret's current certificate once the first bundle is live.
            if seen.is_some() || served.is_some() {
                served = stored.as_ref().map(|s| s.current.ca_der.clone());
            }
        }
        assert!(rotations >= 3, "only {rotations} rotations in 150s");
    }
}
