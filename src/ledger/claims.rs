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
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::fieldpath::FieldPath;
use crate::ledger::evidence::{digest, value_at};
use crate::ledger::phase::{PhaseChange, is_settled, phase_of};
use crate::ledger::plan::{AppendTo, RecordWrite};
use crate::ledger::record::{BackportRequirement, RecordedChange, RecordedField};

/// What one write recorded before its answer, to be confirmed by the object stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// A change appended to a record, named by its request uid.
    Change {
        request_uid: String,
        /// Each recorded field's path and the digest of its new value.
        fields: Vec<(String, String)>,
        /// A DELETE: the object gone is the write stored.
        deleted: bool,
    },
    /// A record created for the write (a window opened, a suspension, a window found under a
    /// change), named.
    Record { name: String },
}

/// The claims a recording plan makes: the changes it appends and the records it creates. A
/// close, an extension or a renewal is not confirmed here (`tests/SECURITY.md` says why each
/// is harmless or confirmed elsewhere).
pub fn claims_of(write: &RecordWrite<'_>, deleted: bool) -> Vec<Claimed> {
    match write {
        RecordWrite::Create(new) => vec![Claimed::Record {
            name: new.record.name_any(),
        }],
        RecordWrite::Append { to, change } => {
            let mut claims = vec![Claimed::Change {
                request_uid: change.request_uid.clone(),
                fields: change
                    .fields
                    .iter()
                    .map(|f: &RecordedField| (f.path.clone(), f.digest.clone()))
                    .collect(),
                deleted,
            }];
            if let AppendTo::New(new) = to {
                claims.push(Claimed::Record {
                    name: new.record.name_any(),
                });
            }
            claims
        }
        RecordWrite::Nothing
        | RecordWrite::Transition { .. }
        | RecordWrite::UpdateWindow { .. }
        | RecordWrite::Renew { .. } => Vec::new(),
    }
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

/// Whether the stored object carries every recorded field of `fields` as recorded.
fn carries(stored: &Value, fields: &[(String, String)]) -> bool {
    fields.iter().all(|(path, recorded)| {
        FieldPath::parse(path).is_ok_and(|path| digest(value_at(stored, &path)) == *recorded)
    })
}

/// The writes that settle `claims` given what the API server showed, against `listed`, the
/// records of the window's object as listed after the answer. A change the stored object
/// carries is marked landed; one never stored (or, but for a delete, whose object is gone) is
/// withdrawn, as is a record created for it with no landed change. A stored object that holds
/// other values (a later write raced it) settles nothing: the change stays a claim, which
/// `driftgate backport` does not write into Git.
pub fn plan_claims<'a>(
    listed: &'a [BackportRequirement],
    claims: &[Claimed],
    shown: Shown<'_>,
    now: Timestamp,
) -> Vec<ClaimWrite<'a>> {
    let mut writes = Vec::new();
    let mut withdrawn_records = Vec::new();
    for claim in claims {
        let Claimed::Record { name } = claim else {
            continue;
        };
        let Some(record) = listed.iter().find(|r| r.name_any() == *name) else {
            continue;
        };
        let never_stored = match shown {
            Shown::NeverStored => true,
            // A record is created for an update or a create; a delete's record is a window
            // found under it, whose change is judged below.
            Shown::Gone => !claims
                .iter()
                .any(|c| matches!(c, Claimed::Change { deleted: true, .. })),
            Shown::Stored(_) => false,
        };
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
            deleted,
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
        let landed = match shown {
            Shown::Stored(stored) => !deleted && carries(stored, fields),
            Shown::Gone => *deleted,
            Shown::NeverStored => false,
        };
        let never_stored = match shown {
            Shown::NeverStored => true,
            Shown::Gone => !deleted,
            Shown::Stored(_) => false,
        };
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
    use crate::ledger::record::{
        BackportRequirementSpec, BackportStatus, Phase, RecordScope, RecordedObject,
        RecordedWindow, Transition,
    };

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

    fn record(name: &str, changes: Vec<RecordedChange>, phase: Phase) -> BackportRequirement {
        let mut record = BackportRequirement::new(
            name,
            BackportRequirementSpec {
                object: RecordedObject {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "api".into(),
                    uid: "u-1".into(),
                },
                scope: RecordScope::Object,
                window: RecordedWindow {
                    opener: Some("alice".into()),
                    reason: Some("INC-1".into()),
                    opened_at: None,
                    expires_at: Time("2026-12-02T11:00:00Z".parse().unwrap()),
                    label_value: "20261202T1100Z".into(),
                },
                policy: "prod".into(),
                changes,
            },
        );
        record.metadata.resource_version = Some("42".into());
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

    fn claimed_change(uid: &str, path: &str, value: &Value, deleted: bool) -> Claimed {
        Claimed::Change {
            request_uid: uid.into(),
            fields: vec![(path.into(), digest(Some(value)))],
            deleted,
        }
    }

    fn deployment(replicas: u64) -> Value {
        json!({"spec": {"replicas": replicas}})
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
            &[claimed_change("b", "spec.replicas", &json!(5), false)],
            Shown::Stored(&stored),
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
        let claims = [claimed_change("a", "spec.replicas", &json!(5), false)];
        for shown in [Shown::NeverStored, Shown::Gone] {
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
        // Another write stored 4 before this read: neither landed nor withdrawn.
        let raced = deployment(4);
        assert_eq!(
            plan_claims(&listed, &claims, Shown::Stored(&raced), now()),
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
            deleted: true,
        }];
        assert!(matches!(
            plan_claims(&listed, &claims, Shown::Gone, now())[..],
            [ClaimWrite::Landed { index: 0, .. }]
        ));
        assert!(matches!(
            plan_claims(&listed, &claims, Shown::NeverStored, now())[..],
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
            claimed_change("a", "spec.replicas", &json!(5), false),
            Claimed::Record {
                name: "found".into(),
            },
        ];
        let writes = plan_claims(&listed, &claims, Shown::NeverStored, now());
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
            plan_claims(&listed, &claims, Shown::Stored(&stored), now())[..],
            [ClaimWrite::Landed { .. }]
        ));
    }

    #[test]
    fn a_record_with_a_landed_change_or_settled_is_never_withdrawn() {
        let mut landed = change("a", "spec.replicas", &json!(5));
        landed.landed = Some(Time(now()));
        let claims = [Claimed::Record { name: "r".into() }];
        let with_landed = [record("r", vec![landed], Phase::Open)];
        assert_eq!(
            plan_claims(&with_landed, &claims, Shown::NeverStored, now()),
            []
        );
        let settled = [record("r", Vec::new(), Phase::Resolved)];
        assert_eq!(
            plan_claims(&settled, &claims, Shown::NeverStored, now()),
            []
        );
        // An opened window never stored, with no change: withdrawn.
        let opened = [record("r", Vec::new(), Phase::Open)];
        assert!(matches!(
            plan_claims(&opened, &claims, Shown::Gone, now())[..],
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
                    &[claimed_change(claim, "spec.replicas", &json!(5), false)],
                    Shown::Stored(&stored),
                    now()
                ),
                []
            );
        }
    }
}
