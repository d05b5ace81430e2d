//! A review is a claim. Every break-glass change is recorded before it is answered (nothing an
//! admitted emergency change does may go unrecorded), so what the ledger writes then rests on
//! the review's word alone: anyone who reaches driftgate's port can POST one, and another
//! webhook may refuse the write after driftgate admitted it. Once the API server has had the
//! write, the object it stored confirms the claim (the change is marked `landed`) or shows it
//! was never stored (the change, or the record created for it, is withdrawn).
//!
//! Pure: the records as listed, the claims of one write, what the API server showed and the
//! clock come in; the writes go out (`writes.rs` makes them).

use jiff::Timestamp;
use kube_core::ResourceExt;
use serde_json::{Value, json};

use crate::fieldpath::FieldPath;
use crate::ledger::evidence::{digest, value_at};
use crate::ledger::plan::{AppendTo, RecordWrite};
use crate::records::phase::{PhaseChange, is_settled, phase_of};
use crate::records::record::{BackportRequirement, RecordedChange};

/// What one write recorded before its answer, to be confirmed by the object stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// A change appended to a record, named by its request uid.
    Change {
        request_uid: String,
        fields: Vec<ClaimedField>,
    },
    /// A record created for the write (a window opened, a suspension, a window found under a
    /// change), named, with the fields the write changed.
    Record {
        name: String,
        fields: Vec<ClaimedField>,
    },
}

/// Which kind of write the claims are of: what the object read back means depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    Update,
    Delete,
}

/// One recorded field of a claimed change: its path, and the digests of its value before the
/// write (as the review's old object had it) and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedField {
    pub path: String,
    pub before: String,
    pub after: String,
}

/// The claims a recording plan makes: the changes it appends and the records it creates. A
/// close, an extension or a renewal is not confirmed here (`tests/SECURITY.md` says why each
/// is harmless or confirmed elsewhere).
pub fn claims_of(write: &RecordWrite<'_>, fields: &[ClaimedField]) -> Vec<Claimed> {
    let record = |name: String| Claimed::Record {
        name,
        fields: fields.to_vec(),
    };
    match write {
        RecordWrite::Create(new) => vec![record(new.record.name_any())],
        RecordWrite::Append { to, change } => {
            let mut claims = vec![Claimed::Change {
                request_uid: change.request_uid.clone(),
                fields: fields.to_vec(),
            }];
            if let AppendTo::New(new) = to {
                claims.push(record(new.record.name_any()));
            }
            claims
        }
        RecordWrite::Nothing
        | RecordWrite::Transition { .. }
        | RecordWrite::UpdateWindow { .. }
        | RecordWrite::Renew { .. } => Vec::new(),
    }
}

/// Whether `write` claims anything [`claims_of`] would confirm: a record created or a change
/// appended.
pub fn makes_claims(write: &RecordWrite<'_>) -> bool {
    matches!(write, RecordWrite::Create(_) | RecordWrite::Append { .. })
}

/// The fields `changed` (paths as driftgate writes them) before and after a write, from the
/// review's objects as JSON.
pub fn claimed_fields(
    changed: &[String],
    old: Option<&Value>,
    new: Option<&Value>,
) -> Vec<ClaimedField> {
    let at = |object: Option<&Value>, path: &Option<FieldPath>| {
        digest(object.zip(path.as_ref()).and_then(|(o, p)| value_at(o, p)))
    };
    changed
        .iter()
        .map(|path_text| {
            let path = FieldPath::parse(path_text).ok();
            ClaimedField {
                path: path_text.clone(),
                before: at(old, &path),
                after: at(new, &path),
            }
        })
        .collect()
}

/// What the API server showed of the write, read back after the answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shown<'a> {
    /// Stored at a newer version: the object as stored.
    Stored(&'a Value),
    /// Gone, replaced by another object of the name, or (for a delete) being deleted.
    Gone,
    /// Still at the version the write was made to, seconds after the answer.
    NeverStored,
}

/// One write that settles a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimWrite<'a> {
    /// The stored object carries the change: marked landed at the time given.
    Landed {
        record: &'a BackportRequirement,
        index: usize,
        request_uid: String,
        at: Timestamp,
    },
    /// The change was never stored: removed from its record.
    WithdrawChange {
        record: &'a BackportRequirement,
        index: usize,
        request_uid: String,
    },
    /// The write the record was created for was never stored, and no change under it landed.
    WithdrawRecord {
        record: &'a BackportRequirement,
        change: PhaseChange,
    },
}

impl ClaimWrite<'_> {
    /// The record written.
    pub fn record(&self) -> &BackportRequirement {
        match self {
            ClaimWrite::Landed { record, .. }
            | ClaimWrite::WithdrawChange { record, .. }
            | ClaimWrite::WithdrawRecord { record, .. } => record,
        }
    }

    /// The JSON patch of a change's write, conditioned on the change still being the one at
    /// its index (another replica may have withdrawn an earlier one); None for a record's
    /// withdrawal, which is a status write.
    pub fn change_patch(&self) -> Option<json_patch::Patch> {
        let patch = match self {
            ClaimWrite::Landed {
                index,
                request_uid,
                at,
                ..
            } => json!([
                {"op": "test", "path": format!("/spec/changes/{index}/requestUid"), "value": request_uid},
                {"op": "add", "path": format!("/spec/changes/{index}/landed"), "value": at.to_string()},
            ]),
            ClaimWrite::WithdrawChange {
                index, request_uid, ..
            } => json!([
                {"op": "test", "path": format!("/spec/changes/{index}/requestUid"), "value": request_uid},
                {"op": "remove", "path": format!("/spec/changes/{index}")},
            ]),
            ClaimWrite::WithdrawRecord { .. } => return None,
        };
        Some(serde_json::from_value(patch).expect("a valid JSON patch"))
    }
}

/// The digest of each claimed field's path as `stored` holds it.
fn stored_digests(stored: &Value, fields: &[ClaimedField]) -> Vec<String> {
    fields
        .iter()
        .map(|f| {
            digest(
                FieldPath::parse(&f.path)
                    .ok()
                    .and_then(|p| value_at(stored, &p)),
            )
        })
        .collect()
}

/// Whether the stored object carries every claimed field as recorded.
fn carries(stored: &Value, fields: &[ClaimedField]) -> bool {
    stored_digests(stored, fields)
        .iter()
        .zip(fields)
        .all(|(held, f)| *held == f.after)
}

/// Whether the stored object carries every field of every claim: the write landed.
pub fn carried_by(stored: &Value, claims: &[Claimed]) -> bool {
    claims.iter().all(|claim| match claim {
        Claimed::Change { fields, .. } | Claimed::Record { fields, .. } => carries(stored, fields),
    })
}

/// Whether the stored object still holds every claimed field as it was before the write, and
/// at least one of them differs from the claimed value: the write changed nothing the API
/// server kept (other writes, a controller's status among them, may have moved the version).
fn holds_the_old_values(stored: &Value, fields: &[ClaimedField]) -> bool {
    let held = stored_digests(stored, fields);
    held.iter().zip(fields).all(|(held, f)| *held == f.before)
        && fields.iter().any(|f| f.before != f.after)
}

/// The writes that settle `claims` given what the API server showed, against `listed`, the
/// records of the window's object as listed after the answer. A change the stored object
/// carries is marked landed; one never stored (see [`never_stored`]) is withdrawn,
/// as is a record created for it with no landed change. A stored object that holds third
/// values (a later write raced it) settles nothing: the change stays a claim, which
/// `driftgate backport` does not write into Git.
pub fn plan_claims<'a>(
    listed: &'a [BackportRequirement],
    claims: &[Claimed],
    (kind, shown): (WriteKind, Shown<'_>),
    now: Timestamp,
) -> Vec<ClaimWrite<'a>> {
    let mut writes = Vec::new();
    let mut withdrawn_records = Vec::new();
    for claim in claims {
        let Claimed::Record { name, fields } = claim else {
            continue;
        };
        let Some(record) = listed.iter().find(|r| r.name_any() == *name) else {
            continue;
        };
        let never_stored = never_stored(kind, shown, fields);
        let any_landed = record.spec.changes.iter().any(|c| c.landed.is_some());
        if never_stored && !any_landed && !is_settled(phase_of(record)) {
            withdrawn_records.push(name.as_str());
            writes.push(ClaimWrite::WithdrawRecord {
                record,
                change: PhaseChange::withdrawn(withdrawn_message(shown)),
            });
        }
    }
    for claim in claims {
        let Claimed::Change {
            request_uid,
            fields,
        } = claim
        else {
            continue;
        };
        let Some((record, index, change)) = find_change(listed, request_uid) else {
            continue;
        };
        if change.landed.is_some() {
            continue;
        }
        let landed = match (kind, shown) {
            (WriteKind::Delete, shown) => shown == Shown::Gone,
            (_, Shown::Stored(stored)) => carries(stored, fields),
            (_, Shown::Gone | Shown::NeverStored) => false,
        };
        let never_stored = never_stored(kind, shown, fields);
        if landed {
            writes.push(ClaimWrite::Landed {
                record,
                index,
                request_uid: request_uid.clone(),
                at: now,
            });
        } else if never_stored && !withdrawn_records.contains(&record.name_any().as_str()) {
            writes.push(ClaimWrite::WithdrawChange {
                record,
                index,
                request_uid: request_uid.clone(),
            });
        }
    }
    writes
}

/// Whether what the API server showed means the write was never stored: the version it was
/// made to, seconds later; for an update, the object stored with every claimed field as it was
/// before; for a create, no such object. An update whose object is gone may have landed (a
/// finalizer removed lets the deletion complete at once): it stays a claim.
fn never_stored(kind: WriteKind, shown: Shown<'_>, fields: &[ClaimedField]) -> bool {
    match (kind, shown) {
        (_, Shown::NeverStored) => true,
        (WriteKind::Create, Shown::Gone) => true,
        (WriteKind::Update, Shown::Stored(stored)) => holds_the_old_values(stored, fields),
        _ => false,
    }
}

fn find_change<'a>(
    listed: &'a [BackportRequirement],
    request_uid: &str,
) -> Option<(&'a BackportRequirement, usize, &'a RecordedChange)> {
    listed.iter().find_map(|record| {
        record
            .spec
            .changes
            .iter()
            .enumerate()
            .find(|(_, c)| c.request_uid == request_uid)
            .map(|(index, change)| (record, index, change))
    })
}

fn withdrawn_message(shown: Shown<'_>) -> String {
    match shown {
        Shown::Gone => "the object the write was reviewed for does not exist as the review named it: the API server never stored the write (a forged review, or refused after driftgate admitted it)".to_owned(),
        _ => "the object read back from the API server seconds after the answer was still at the version the write was made to: the write was never stored (refused after driftgate admitted it, or a forged review)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::ledger::plan::tests::open_record;
    use crate::records::record::{BackportStatus, Phase, RecordedField, Transition};

    const NOW: &str = "2026-12-02T10:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn change(uid: &str, path: &str, value: &Value) -> RecordedChange {
        RecordedChange {
            time: Time(now()),
            user: "alice".into(),
            operation: "UPDATE".into(),
            object: None,
            subresource: String::new(),
            request_uid: uid.into(),
            resource_version: "7".into(),
            fields: vec![RecordedField {
                path: path.into(),
                digest: digest(Some(value)),
                value: None,
            }],
            landed: None,
        }
    }

    /// The plan tests' open record of Deployment api, with `changes`, in `phase`.
    fn record(name: &str, changes: Vec<RecordedChange>, phase: Phase) -> BackportRequirement {
        let mut record = open_record(name, "2026-12-02T11:00:00Z");
        record.spec.changes = changes;
        record.status = Some(BackportStatus {
            phase,
            transitions: vec![Transition {
                phase,
                time: Time(now()),
                reason: "Opened".into(),
                message: String::new(),
            }],
            ..BackportStatus::default()
        });
        record
    }

    /// `spec.replicas` from 3 to `value`.
    fn replicas_to(value: &Value) -> Vec<ClaimedField> {
        claimed_fields(
            &["spec.replicas".to_owned()],
            Some(&deployment(3)),
            Some(&json!({"spec": {"replicas": value}})),
        )
    }

    /// A claimed change of `spec.replicas` from 3 to `value`.
    fn claimed_change(uid: &str, value: &Value) -> Claimed {
        Claimed::Change {
            request_uid: uid.into(),
            fields: replicas_to(value),
        }
    }

    /// What an update's read-back showed.
    fn updated(shown: Shown<'_>) -> (WriteKind, Shown<'_>) {
        (WriteKind::Update, shown)
    }

    fn deployment(replicas: u64) -> Value {
        json!({"spec": {"replicas": replicas}})
    }

    /// The read-back reads on while a newer version does not carry the claims (a status write
    /// moved the version, and the API server may still retry the write after that conflict).
    #[test]
    fn a_write_shows_once_the_stored_object_carries_every_claim() {
        let claims = [
            claimed_change("u1", &json!(5)),
            Claimed::Record {
                name: "deployment-api-1".into(),
                fields: replicas_to(&json!(5)),
            },
        ];
        assert!(carried_by(&deployment(5), &claims));
        assert!(!carried_by(&deployment(3), &claims));
        assert!(!carried_by(&json!({"spec": {}}), &claims));
        let other = [
            claimed_change("u1", &json!(5)),
            claimed_change("u2", &json!(6)),
        ];
        assert!(!carried_by(&deployment(5), &other));
    }

    #[test]
    fn a_change_the_stored_object_carries_is_marked_landed() {
        let listed = [record(
            "r",
            vec![
                change("a", "spec.replicas", &json!(3)),
                change("b", "spec.replicas", &json!(5)),
            ],
            Phase::Open,
        )];
        let stored = deployment(5);
        let writes = plan_claims(
            &listed,
            &[claimed_change("b", &json!(5))],
            updated(Shown::Stored(&stored)),
            now(),
        );
        assert_eq!(
            writes,
            [ClaimWrite::Landed {
                record: &listed[0],
                index: 1,
                request_uid: "b".into(),
                at: now()
            }]
        );
        let patch = serde_json::to_value(writes[0].change_patch().unwrap()).unwrap();
        assert_eq!(patch[0]["path"], "/spec/changes/1/requestUid");
        assert_eq!(patch[1]["path"], "/spec/changes/1/landed");
    }

    #[test]
    fn a_change_never_stored_is_withdrawn_and_one_raced_stays_a_claim() {
        let listed = [record(
            "r",
            vec![change("a", "spec.replicas", &json!(5))],
            Phase::Open,
        )];
        let claims = [claimed_change("a", &json!(5))];
        for shown in [
            (WriteKind::Update, Shown::NeverStored),
            (WriteKind::Create, Shown::NeverStored),
            (WriteKind::Create, Shown::Gone),
        ] {
            let writes = plan_claims(&listed, &claims, shown, now());
            assert_eq!(
                writes,
                [ClaimWrite::WithdrawChange {
                    record: &listed[0],
                    index: 0,
                    request_uid: "a".into()
                }],
                "{shown:?}"
            );
            let patch = serde_json::to_value(writes[0].change_patch().unwrap()).unwrap();
            assert_eq!(patch[1], json!({"op": "remove", "path": "/spec/changes/0"}));
        }
        // An update whose object is gone may have landed (a finalizer removed lets the
        // deletion complete): it stays a claim.
        assert_eq!(
            plan_claims(&listed, &claims, updated(Shown::Gone), now()),
            []
        );
        // Stored at a newer version (a controller wrote status) with the old value: never
        // stored either.
        let unchanged = deployment(3);
        assert!(matches!(
            plan_claims(&listed, &claims, updated(Shown::Stored(&unchanged)), now())[..],
            [ClaimWrite::WithdrawChange { index: 0, .. }]
        ));
        // Another write stored a third value: neither landed nor withdrawn.
        let raced = deployment(4);
        assert_eq!(
            plan_claims(&listed, &claims, updated(Shown::Stored(&raced)), now()),
            []
        );
    }

    #[test]
    fn a_delete_lands_when_its_object_is_gone() {
        let listed = [record(
            "r",
            vec![change("d", "spec", &Value::Null)],
            Phase::Open,
        )];
        let claims = [Claimed::Change {
            request_uid: "d".into(),
            fields: Vec::new(),
        }];
        let deleted = |shown| (WriteKind::Delete, shown);
        assert!(matches!(
            plan_claims(&listed, &claims, deleted(Shown::Gone), now())[..],
            [ClaimWrite::Landed { index: 0, .. }]
        ));
        assert!(matches!(
            plan_claims(&listed, &claims, deleted(Shown::NeverStored), now())[..],
            [ClaimWrite::WithdrawChange { index: 0, .. }]
        ));
    }

    #[test]
    fn a_record_created_for_a_write_never_stored_is_withdrawn_whole() {
        // A window found under a forged change: the record goes, with the change in it as
        // what was claimed.
        let listed = [record(
            "found",
            vec![change("a", "spec.replicas", &json!(5))],
            Phase::Open,
        )];
        let claims = [
            claimed_change("a", &json!(5)),
            Claimed::Record {
                name: "found".into(),
                fields: replicas_to(&json!(5)),
            },
        ];
        let writes = plan_claims(&listed, &claims, updated(Shown::NeverStored), now());
        assert_eq!(writes.len(), 1, "{writes:?}");
        let ClaimWrite::WithdrawRecord { record, change } = &writes[0] else {
            panic!("{writes:?}")
        };
        assert_eq!(
            (record.name_any(), change.phase),
            ("found".into(), Phase::Withdrawn)
        );
        assert!(writes[0].change_patch().is_none());
        // Stored: the record stays.
        let stored = deployment(5);
        assert!(matches!(
            plan_claims(&listed, &claims, updated(Shown::Stored(&stored)), now())[..],
            [ClaimWrite::Landed { .. }]
        ));
    }

    #[test]
    fn a_record_with_a_landed_change_or_settled_is_never_withdrawn() {
        let mut landed = change("a", "spec.replicas", &json!(5));
        landed.landed = Some(Time(now()));
        let claims = [Claimed::Record {
            name: "r".into(),
            fields: replicas_to(&json!(5)),
        }];
        let with_landed = [record("r", vec![landed], Phase::Open)];
        assert_eq!(
            plan_claims(&with_landed, &claims, updated(Shown::NeverStored), now()),
            []
        );
        let settled = [record("r", Vec::new(), Phase::Resolved)];
        assert_eq!(
            plan_claims(&settled, &claims, updated(Shown::NeverStored), now()),
            []
        );
        // An opened window never stored, with no change: withdrawn.
        let opened = [record("r", Vec::new(), Phase::Open)];
        assert!(matches!(
            plan_claims(&opened, &claims, updated(Shown::NeverStored), now())[..],
            [ClaimWrite::WithdrawRecord { .. }]
        ));
    }

    #[test]
    fn a_change_already_landed_or_unknown_is_left_alone() {
        let mut landed = change("a", "spec.replicas", &json!(5));
        landed.landed = Some(Time(now()));
        let listed = [record("r", vec![landed], Phase::Open)];
        let stored = deployment(5);
        for claim in ["a", "unknown"] {
            assert_eq!(
                plan_claims(
                    &listed,
                    &[claimed_change(claim, &json!(5))],
                    updated(Shown::Stored(&stored)),
                    now()
                ),
                []
            );
        }
    }
}
