//! What a DELETE would delete with it. Kubernetes' garbage collector deletes an object once
//! every owner in its `ownerReferences` is gone: a StatefulSet's claims under
//! `persistentVolumeClaimRetentionPolicy.whenDeleted: Delete`, the claims an operator's custom
//! resource owns, and whatever is owned through a chain of such owners. The collector itself is
//! exempt from `deletions` (its deletes follow one that was admitted), so the protection judges
//! the delete that starts the cascade: the protected objects it would reach are judged as if
//! they were deleted themselves.
//!
//! Pure: a [`Walk`] says which owner kinds it must read next; the server lists them (metadata
//! only, in the deleted object's namespace) and hands back what it found; [`Walk::finish`] says
//! which protected objects the collector would delete, and the decision judges them as a
//! [`DeletionCascade`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::text::{MAX_NAME_CHARS, echo};

/// Whether a DELETE leaves the object's dependents in place, decided as the API server decides
/// it (`shouldOrphanDependents`): `orphanDependents` in the request's options, else its
/// `propagationPolicy`, else the finalizer the stored object already carries (`orphan` or
/// `foregroundDeletion`). Without any of them the kind's default applies, which is to delete
/// the dependents for every kind but `batch/v1` Jobs; counting those as cascading too only
/// judges a delete that might have kept its dependents.
pub fn orphans_dependents(options: Option<&Value>, stored: Option<&ObjectMeta>) -> bool {
    if let Some(orphan) = options
        .and_then(|o| o.get("orphanDependents"))
        .and_then(Value::as_bool)
    {
        return orphan;
    }
    match options
        .and_then(|o| o.get("propagationPolicy"))
        .and_then(Value::as_str)
    {
        Some("Orphan") => return true,
        Some("Background" | "Foreground") => return false,
        _ => {}
    }
    stored
        .and_then(|meta| meta.finalizers.as_ref())
        .and_then(|finalizers| {
            finalizers.iter().find_map(|f| match f.as_str() {
                "orphan" => Some(true),
                "foregroundDeletion" => Some(false),
                _ => None,
            })
        })
        .unwrap_or(false)
}

/// A kind as an ownerReference names it: its API group ("" for the core group) and kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn new(group: impl Into<String>, kind: impl Into<String>) -> Self {
        GroupKind {
            group: group.into(),
            kind: kind.into(),
        }
    }

    /// The kind `owner` names: the group of its apiVersion (`apps/v1`: `apps`; `v1`: core).
    pub fn of_owner(owner: &OwnerReference) -> Self {
        let group = owner
            .api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group);
        GroupKind::new(group, owner.kind.clone())
    }
}

/// An object the walk read: its kind, its resource (plural) and its metadata.
#[derive(Clone, Debug)]
pub struct ReadObject {
    pub kind: GroupKind,
    pub resource: String,
    pub meta: ObjectMeta,
}

/// What became of reading the objects of one owner kind in the namespace.
#[derive(Clone, Debug)]
pub enum KindRead {
    /// Every object of the kind in the namespace was read: an owner of that kind that is not
    /// among them is gone (or has another uid), as the collector would find it.
    Listed,
    /// An owner of this kind never goes with a namespaced object: the kind is cluster-scoped
    /// (such objects have no namespaced owners), or not served at all (then the collector cannot
    /// resolve the owner either, and never deletes its dependents).
    NeverCascades,
    /// The kind could not be read (`why`): whether its objects lead to the deleted one is not
    /// known.
    Unreadable(String),
}

/// A protected object the deleted one would take with it.
#[derive(Clone, Debug)]
pub struct Dependent {
    pub kind: GroupKind,
    pub resource: String,
    pub meta: ObjectMeta,
    /// The owners between it and the deleted object, nearest first ("StatefulSet db"); empty
    /// when the deleted object owns it directly.
    pub through: Vec<String>,
    /// Why driftgate cannot tell whether the collector deletes it; None: it does.
    pub undetermined: Option<String>,
}

impl Dependent {
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or("")
    }
}

/// What the server found a DELETE would delete with it, for the decision to judge.
#[derive(Clone, Debug)]
pub enum DeletionCascade {
    /// The protected objects of the namespace were read: these would (or may) go with it.
    Read(Vec<Dependent>),
    /// The protected objects could not be read (why): nothing can be said of the cascade.
    Unreadable(String),
}

/// How one owner reference stands towards the deleted object.
enum Link {
    /// The owner is the deleted object, or goes with it.
    Deleted,
    /// The owner is gone or being deleted: it keeps nothing.
    Gone,
    /// The owner stays (for now: it may yet be found to go with the deleted object).
    Stays,
    /// Not known: its kind could not be read.
    Unknown,
}

/// The protected objects of a namespace and their owners, read up towards a deleted object.
#[derive(Debug)]
pub struct Walk {
    deleted_uid: String,
    /// The protected objects that may go with it, by uid.
    candidates: Vec<String>,
    /// Every object read, by uid.
    objects: HashMap<String, ReadObject>,
    kinds: BTreeMap<GroupKind, KindRead>,
}

/// Whether a Pod controls the object: a claim made for a Pod (a generic ephemeral volume, or a
/// StatefulSet pod's claim when the pod is scaled away under `whenScaled: Delete`) is meant to
/// go with it, whoever deletes the Pod.
fn controlled_by_pod(meta: &ObjectMeta) -> bool {
    meta.owner_references.iter().flatten().any(|owner| {
        owner.controller == Some(true) && owner.kind == "Pod" && owner.api_version == "v1"
    })
}

impl Walk {
    /// A walk up to the object with `deleted_uid`, from the protected objects given to
    /// [`Walk::protected`].
    pub fn new(deleted_uid: impl Into<String>) -> Walk {
        Walk {
            deleted_uid: deleted_uid.into(),
            candidates: Vec::new(),
            objects: HashMap::new(),
            kinds: BTreeMap::new(),
        }
    }

    /// Every object of a protected kind in the namespace. Only those with owners can go with the
    /// deleted object; those being deleted already are going anyway, and those a Pod controls
    /// are the Pod's own.
    pub fn protected(&mut self, kind: GroupKind, objects: Vec<ReadObject>) {
        for object in &objects {
            let Some(uid) = object.meta.uid.as_deref() else {
                continue;
            };
            if uid != self.deleted_uid
                && object.meta.deletion_timestamp.is_none()
                && object
                    .meta
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| !o.is_empty())
                && !controlled_by_pod(&object.meta)
            {
                self.candidates.push(uid.to_owned());
            }
        }
        self.listed(kind, objects);
    }

    /// Every object of an owner kind in the namespace.
    pub fn listed(&mut self, kind: GroupKind, objects: Vec<ReadObject>) {
        for object in objects {
            if let Some(uid) = object.meta.uid.clone() {
                self.objects.insert(uid, object);
            }
        }
        self.kinds.insert(kind, KindRead::Listed);
    }

    /// An owner kind that never takes a namespaced object with it (see [`KindRead`]).
    pub fn never_cascades(&mut self, kind: GroupKind) {
        self.kinds.insert(kind, KindRead::NeverCascades);
    }

    /// An owner kind that could not be read, and why.
    pub fn unreadable(&mut self, kind: GroupKind, why: String) {
        self.kinds.insert(kind, KindRead::Unreadable(why));
    }

    /// Whether no protected object can go with the deleted one, whatever its owners are.
    pub fn has_no_candidates(&self) -> bool {
        self.candidates.is_empty()
    }

    /// The owner kinds to read next: those named on the way up from a protected object to the
    /// deleted one and not read yet.
    pub fn kinds_to_read(&self) -> BTreeSet<GroupKind> {
        let mut wanted = BTreeSet::new();
        for uid in self.reachable() {
            for owner in self.owners_of(uid) {
                if owner.uid != self.deleted_uid && !self.objects.contains_key(&owner.uid) {
                    let kind = GroupKind::of_owner(owner);
                    if !self.kinds.contains_key(&kind) {
                        wanted.insert(kind);
                    }
                }
            }
        }
        wanted
    }

    /// The protected objects the collector would delete after the deleted object, and those it
    /// may delete (their owners could not all be read).
    pub fn finish(&self) -> Vec<Dependent> {
        let reachable = self.reachable();
        let surely = self.closure(&reachable, false);
        let maybe = self.closure(&reachable, true);
        let mut dependents = Vec::new();
        for uid in &self.candidates {
            let object = &self.objects[uid];
            let undetermined = if surely.contains_key(uid.as_str()) {
                None
            } else if maybe.contains_key(uid.as_str()) {
                Some(self.unknowns_above(uid))
            } else {
                continue;
            };
            dependents.push(Dependent {
                kind: object.kind.clone(),
                resource: object.resource.clone(),
                meta: object.meta.clone(),
                through: match undetermined {
                    None => self.chain(uid, &surely),
                    Some(_) => Vec::new(),
                },
                undetermined,
            });
        }
        dependents
    }

    fn owners_of(&self, uid: &str) -> &[OwnerReference] {
        self.objects
            .get(uid)
            .and_then(|o| o.meta.owner_references.as_deref())
            .unwrap_or(&[])
    }

    /// The uids of the candidates and of every object read above them (cycles are cut).
    fn reachable(&self) -> Vec<&str> {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut queue: Vec<&str> = self.candidates.iter().map(String::as_str).collect();
        let mut order = Vec::new();
        while let Some(uid) = queue.pop() {
            if !seen.insert(uid) {
                continue;
            }
            order.push(uid);
            for owner in self.owners_of(uid) {
                if owner.uid != self.deleted_uid && self.objects.contains_key(&owner.uid) {
                    queue.push(owner.uid.as_str());
                }
            }
        }
        order
    }

    fn link(&self, owner: &OwnerReference, inside: &HashMap<&str, &str>) -> Link {
        if owner.uid == self.deleted_uid || inside.contains_key(owner.uid.as_str()) {
            return Link::Deleted;
        }
        // The collector finds an owner by its uid: an object of the same name and another uid
        // is not it.
        if let Some(object) = self.objects.get(&owner.uid) {
            return if object.meta.deletion_timestamp.is_some() {
                Link::Gone
            } else {
                Link::Stays
            };
        }
        match self.kinds.get(&GroupKind::of_owner(owner)) {
            Some(KindRead::Listed) => Link::Gone,
            Some(KindRead::NeverCascades) => Link::Stays,
            Some(KindRead::Unreadable(_)) | None => Link::Unknown,
        }
    }

    /// The objects the collector deletes once the deleted object is gone, each with the owner
    /// through which it goes: those with an owner that goes and no owner that stays (the
    /// collector keeps an object any of whose owners stays), repeated until nothing is added.
    /// With `assume_unknown`, owners that could not be read count as going: what it may delete.
    fn closure<'w>(
        &'w self,
        reachable: &[&'w str],
        assume_unknown: bool,
    ) -> HashMap<&'w str, &'w str> {
        let mut inside: HashMap<&str, &str> = HashMap::new();
        loop {
            let mut grew = false;
            for &uid in reachable {
                if inside.contains_key(uid) {
                    continue;
                }
                let mut through = None;
                let mut kept = false;
                for owner in self.owners_of(uid) {
                    match self.link(owner, &inside) {
                        Link::Deleted => {
                            through.get_or_insert(owner.uid.as_str());
                        }
                        Link::Unknown if assume_unknown => {
                            through.get_or_insert(owner.uid.as_str());
                        }
                        Link::Gone => {}
                        Link::Stays | Link::Unknown => {
                            kept = true;
                            break;
                        }
                    }
                }
                if let (false, Some(through)) = (kept, through) {
                    inside.insert(uid, through);
                    grew = true;
                }
            }
            if !grew {
                return inside;
            }
        }
    }

    /// The owners between `uid` and the deleted object, nearest first, as "Kind name".
    fn chain(&self, uid: &str, inside: &HashMap<&str, &str>) -> Vec<String> {
        let mut through = Vec::new();
        let mut at = uid;
        while let Some(&owner) = inside.get(at) {
            if owner == self.deleted_uid || through.len() > self.objects.len() {
                break;
            }
            if let Some(object) = self.objects.get(owner) {
                through.push(format!(
                    "{} {}",
                    object.kind.kind,
                    echo(object.meta.name.as_deref().unwrap_or(""), MAX_NAME_CHARS)
                ));
            }
            at = owner;
        }
        through
    }

    /// Why the owners above `uid` are not all known: the problems of the kinds not read.
    fn unknowns_above(&self, uid: &str) -> String {
        let mut problems = BTreeSet::new();
        let mut seen = HashSet::new();
        let mut queue = vec![uid];
        while let Some(at) = queue.pop() {
            if !seen.insert(at) {
                continue;
            }
            for owner in self.owners_of(at) {
                if owner.uid == self.deleted_uid {
                    continue;
                }
                if self.objects.contains_key(&owner.uid) {
                    queue.push(owner.uid.as_str());
                    continue;
                }
                let kind = GroupKind::of_owner(owner);
                match self.kinds.get(&kind) {
                    Some(KindRead::Unreadable(why)) => {
                        problems.insert(why.clone());
                    }
                    None => {
                        problems.insert(format!("its owner's kind {} was not read", kind.kind));
                    }
                    Some(KindRead::Listed | KindRead::NeverCascades) => {}
                }
            }
        }
        problems.into_iter().collect::<Vec<_>>().join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SET: &str = "set-uid";

    fn owner(api_version: &str, kind: &str, name: &str, uid: &str, controller: bool) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": controller, "blockOwnerDeletion": true})
    }

    fn object(
        kind: (&str, &str),
        resource: &str,
        name: &str,
        uid: &str,
        owners: Vec<Value>,
    ) -> ReadObject {
        ReadObject {
            kind: GroupKind::new(kind.0, kind.1),
            resource: resource.to_owned(),
            meta: serde_json::from_value(json!({"name": name, "namespace": "prod-db", "uid": uid,
                "ownerReferences": owners}))
            .unwrap(),
        }
    }

    fn claim(name: &str, owners: Vec<Value>) -> ReadObject {
        object(
            ("", "PersistentVolumeClaim"),
            "persistentvolumeclaims",
            name,
            &format!("{name}-uid"),
            owners,
        )
    }

    fn claims() -> GroupKind {
        GroupKind::new("", "PersistentVolumeClaim")
    }

    fn sets() -> GroupKind {
        GroupKind::new("apps", "StatefulSet")
    }

    fn names(dependents: &[Dependent]) -> Vec<(String, Vec<String>, Option<String>)> {
        dependents
            .iter()
            .map(|d| {
                (
                    d.name().to_owned(),
                    d.through.clone(),
                    d.undetermined.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_delete_orphans_as_the_api_server_decides() {
        let finalizers = |f: &str| -> ObjectMeta {
            serde_json::from_value(json!({"name": "web", "finalizers": [f]})).unwrap()
        };
        let options = |v: Value| Some(v);
        assert!(
            !orphans_dependents(None, None),
            "the default deletes dependents"
        );
        assert!(orphans_dependents(
            options(json!({"propagationPolicy": "Orphan"})).as_ref(),
            None
        ));
        assert!(!orphans_dependents(
            options(json!({"propagationPolicy": "Background"})).as_ref(),
            None
        ));
        assert!(!orphans_dependents(
            options(json!({"propagationPolicy": "Foreground"})).as_ref(),
            None
        ));
        // The deprecated flag wins over the policy, as in the API server.
        assert!(orphans_dependents(
            options(json!({"orphanDependents": true, "propagationPolicy": "Background"})).as_ref(),
            None
        ));
        assert!(!orphans_dependents(
            options(json!({"orphanDependents": false})).as_ref(),
            Some(&finalizers("orphan"))
        ));
        // Without options, the finalizer the object carries.
        assert!(orphans_dependents(
            options(json!({})).as_ref(),
            Some(&finalizers("orphan"))
        ));
        assert!(!orphans_dependents(
            None,
            Some(&finalizers("foregroundDeletion"))
        ));
        assert!(!orphans_dependents(
            options(json!({"propagationPolicy": "Background"})).as_ref(),
            Some(&finalizers("orphan"))
        ));
    }

    #[test]
    fn a_statefulsets_claims_go_with_it_and_no_owner_needs_reading() {
        let mut walk = Walk::new(SET);
        walk.protected(
            claims(),
            vec![
                claim(
                    "data-web-0",
                    vec![owner("apps/v1", "StatefulSet", "web", SET, true)],
                ),
                claim(
                    "data-web-1",
                    vec![owner("apps/v1", "StatefulSet", "web", SET, true)],
                ),
                // Made by hand: no owner, nothing deletes it.
                claim("scratch", vec![]),
            ],
        );
        assert!(walk.kinds_to_read().is_empty());
        assert_eq!(
            names(&walk.finish()),
            [
                ("data-web-0".to_owned(), vec![], None),
                ("data-web-1".to_owned(), vec![], None)
            ]
        );
    }

    #[test]
    fn claims_of_another_statefulset_stay_once_their_owner_is_read() {
        let mut walk = Walk::new("configmap-uid");
        walk.protected(
            claims(),
            vec![claim(
                "data-db-0",
                vec![owner("apps/v1", "StatefulSet", "db", "db-uid", true)],
            )],
        );
        assert_eq!(walk.kinds_to_read(), BTreeSet::from([sets()]));
        // Not read yet: it may go.
        assert!(walk.finish()[0].undetermined.is_some());
        walk.listed(
            sets(),
            vec![object(
                ("apps", "StatefulSet"),
                "statefulsets",
                "db",
                "db-uid",
                vec![],
            )],
        );
        assert!(walk.kinds_to_read().is_empty());
        assert!(walk.finish().is_empty(), "its owner stays");
    }

    #[test]
    fn an_operators_resource_takes_the_claims_of_the_statefulset_it_owns() {
        let mut walk = Walk::new("database-uid");
        walk.protected(
            claims(),
            vec![claim(
                "data-db-0",
                vec![owner("apps/v1", "StatefulSet", "db", "db-uid", true)],
            )],
        );
        walk.listed(
            sets(),
            vec![object(
                ("apps", "StatefulSet"),
                "statefulsets",
                "db",
                "db-uid",
                vec![owner(
                    "example.com/v1",
                    "Database",
                    "orders",
                    "database-uid",
                    true,
                )],
            )],
        );
        assert!(
            walk.kinds_to_read().is_empty(),
            "the deleted object needs no reading"
        );
        assert_eq!(
            names(&walk.finish()),
            [(
                "data-db-0".to_owned(),
                vec!["StatefulSet db".to_owned()],
                None
            )]
        );
        // And a claim it owns directly.
        let mut walk = Walk::new("database-uid");
        walk.protected(
            claims(),
            vec![claim(
                "wal",
                vec![owner(
                    "example.com/v1",
                    "Database",
                    "orders",
                    "database-uid",
                    false,
                )],
            )],
        );
        assert_eq!(names(&walk.finish()), [("wal".to_owned(), vec![], None)]);
    }

    #[test]
    fn an_owner_that_stays_keeps_the_claim() {
        let mut walk = Walk::new(SET);
        walk.protected(
            claims(),
            vec![
                claim(
                    "shared",
                    vec![
                        owner("apps/v1", "StatefulSet", "web", SET, true),
                        owner("example.com/v1", "Backup", "nightly", "backup-uid", false),
                    ],
                ),
                claim(
                    "dangling",
                    vec![
                        owner("apps/v1", "StatefulSet", "web", SET, true),
                        owner("example.com/v1", "Backup", "gone", "gone-uid", false),
                    ],
                ),
                claim(
                    "deleting",
                    vec![
                        owner("apps/v1", "StatefulSet", "web", SET, true),
                        owner("example.com/v1", "Backup", "old", "old-uid", false),
                    ],
                ),
            ],
        );
        assert_eq!(
            walk.kinds_to_read(),
            BTreeSet::from([GroupKind::new("example.com", "Backup")])
        );
        let mut deleting = object(
            ("example.com", "Backup"),
            "backups",
            "old",
            "old-uid",
            vec![],
        );
        deleting.meta.deletion_timestamp =
            serde_json::from_value(json!("2026-11-30T08:00:00Z")).unwrap();
        walk.listed(
            GroupKind::new("example.com", "Backup"),
            vec![
                object(
                    ("example.com", "Backup"),
                    "backups",
                    "nightly",
                    "backup-uid",
                    vec![],
                ),
                deleting,
            ],
        );
        // The collector keeps an object one of whose owners stays; an owner gone or being
        // deleted keeps nothing.
        assert_eq!(
            names(&walk.finish()),
            [
                ("dangling".to_owned(), vec![], None),
                ("deleting".to_owned(), vec![], None)
            ]
        );
    }

    #[test]
    fn an_owner_kind_that_cannot_be_read_leaves_the_claim_undetermined() {
        let mut walk = Walk::new("configmap-uid");
        walk.protected(
            claims(),
            vec![claim(
                "data",
                vec![owner(
                    "example.com/v1",
                    "Database",
                    "orders",
                    "database-uid",
                    true,
                )],
            )],
        );
        walk.unreadable(
            GroupKind::new("example.com", "Database"),
            "driftgate may not list databases.example.com".to_owned(),
        );
        assert!(walk.kinds_to_read().is_empty());
        assert_eq!(
            names(&walk.finish()),
            [(
                "data".to_owned(),
                vec![],
                Some("driftgate may not list databases.example.com".to_owned())
            )]
        );
        // A kind the API server does not serve (an operator uninstalled): the collector cannot
        // resolve the owner and never deletes the claim.
        let mut walk = Walk::new("configmap-uid");
        walk.protected(
            claims(),
            vec![claim(
                "data",
                vec![owner(
                    "example.com/v1",
                    "Database",
                    "orders",
                    "database-uid",
                    true,
                )],
            )],
        );
        walk.never_cascades(GroupKind::new("example.com", "Database"));
        assert!(walk.finish().is_empty());
    }

    #[test]
    fn claims_of_pods_being_deleted_or_without_owners_are_no_candidates() {
        let mut walk = Walk::new(SET);
        let mut being_deleted = claim(
            "old",
            vec![owner("apps/v1", "StatefulSet", "web", SET, true)],
        );
        being_deleted.meta.deletion_timestamp =
            serde_json::from_value(json!("2026-11-30T08:00:00Z")).unwrap();
        walk.protected(
            claims(),
            vec![
                being_deleted,
                // A generic ephemeral volume, through the pod the StatefulSet owns.
                claim(
                    "web-0-scratch",
                    vec![owner("v1", "Pod", "web-0", "pod-uid", true)],
                ),
                claim("free", vec![]),
            ],
        );
        assert!(walk.has_no_candidates());
        assert!(walk.kinds_to_read().is_empty());
        assert!(walk.finish().is_empty());
    }

    #[test]
    fn ownership_cycles_end() {
        let mut walk = Walk::new("configmap-uid");
        walk.protected(
            claims(),
            vec![claim(
                "data",
                vec![owner("example.com/v1", "Thing", "a", "a-uid", false)],
            )],
        );
        walk.listed(
            GroupKind::new("example.com", "Thing"),
            vec![
                object(
                    ("example.com", "Thing"),
                    "things",
                    "a",
                    "a-uid",
                    vec![owner("example.com/v1", "Thing", "b", "b-uid", false)],
                ),
                object(
                    ("example.com", "Thing"),
                    "things",
                    "b",
                    "b-uid",
                    vec![owner("example.com/v1", "Thing", "a", "a-uid", false)],
                ),
            ],
        );
        assert!(walk.kinds_to_read().is_empty());
        assert!(
            walk.finish().is_empty(),
            "a cycle that the deleted object is not in stays"
        );
        // A chain of owners up to the deleted object goes with it, link by link.
        let mut walk = Walk::new("root-uid");
        walk.protected(
            claims(),
            vec![claim(
                "data",
                vec![owner("example.com/v1", "Thing", "a", "a-uid", false)],
            )],
        );
        walk.listed(
            GroupKind::new("example.com", "Thing"),
            vec![
                object(
                    ("example.com", "Thing"),
                    "things",
                    "a",
                    "a-uid",
                    vec![owner("example.com/v1", "Thing", "b", "b-uid", false)],
                ),
                object(
                    ("example.com", "Thing"),
                    "things",
                    "b",
                    "b-uid",
                    vec![owner("example.com/v1", "Thing", "root", "root-uid", false)],
                ),
            ],
        );
        assert_eq!(
            names(&walk.finish()),
            [(
                "data".to_owned(),
                vec!["Thing a".to_owned(), "Thing b".to_owned()],
                None
            )]
        );
    }
}
