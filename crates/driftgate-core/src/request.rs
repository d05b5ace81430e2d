//! One description of a request: what the decision, its Events and the server's log say about
//! who wrote what, computed once per review from the AdmissionRequest alone (no I/O, no clock).
//!
//! Facts that need the cluster (the parent's kind from discovery, the Namespace's labels) are
//! not here: the decision resolves those and records them in its `DecisionRecord`.

use std::borrow::Cow;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube_core::{DynamicObject, GroupVersionKind, GroupVersionResource};

use crate::policy::document::GuardedOperation;
use crate::review::lazy::{LazyObject, LazyReview};
use crate::text::{MAX_NAME_CHARS, echo};

/// Who a request without a username is, in messages and Events.
pub const ANONYMOUS: &str = "an anonymous client";

/// One object of a review, read whole (a file, a test) or as the server reads it, its
/// remainder parsed on first use (see `review::lazy`).
#[derive(Clone, Copy)]
pub enum ReviewObject<'a> {
    Whole(&'a DynamicObject),
    Lazy(&'a LazyObject<'a>),
}

impl<'a> ReviewObject<'a> {
    /// The object's apiVersion, kind and metadata. Its `metadata.managedFields` and `data`
    /// may be unset: ask [`Self::whole`] for those.
    pub fn head(self) -> &'a DynamicObject {
        match self {
            ReviewObject::Whole(object) => object,
            ReviewObject::Lazy(object) => object.head(),
        }
    }

    /// The object's metadata, managedFields aside (see [`Self::head`]).
    pub fn metadata(self) -> &'a ObjectMeta {
        &self.head().metadata
    }

    /// The whole object, read now if it was not.
    pub fn whole(self) -> &'a DynamicObject {
        match self {
            ReviewObject::Whole(object) => object,
            ReviewObject::Lazy(object) => object.whole(),
        }
    }
}

impl std::fmt::Debug for ReviewObject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReviewObject").field(self.head()).finish()
    }
}

/// A request's envelope: who, what, where, which operation; everything but its objects, which
/// the server's request does not hold (`review::lazy`): read them through
/// [`RequestFacts::object`] and [`RequestFacts::old_object`].
#[derive(Clone, Copy, Debug)]
pub struct RequestEnvelope<'a>(&'a AdmissionRequest<DynamicObject>);

impl<'a> From<&'a AdmissionRequest<DynamicObject>> for RequestEnvelope<'a> {
    fn from(request: &'a AdmissionRequest<DynamicObject>) -> Self {
        RequestEnvelope(request)
    }
}

impl<'a> RequestEnvelope<'a> {
    pub fn uid(self) -> &'a str {
        &self.0.uid
    }

    pub fn operation(self) -> Operation {
        self.0.operation.clone()
    }

    /// The object's name; "" for a CREATE with `generateName`.
    pub fn name(self) -> &'a str {
        &self.0.name
    }

    pub fn namespace(self) -> Option<&'a str> {
        self.0.namespace.as_deref()
    }

    /// The kind written: the subresource's for a subresource (`Scale`).
    pub fn kind(self) -> &'a GroupVersionKind {
        &self.0.kind
    }

    pub fn resource(self) -> &'a GroupVersionResource {
        &self.0.resource
    }

    pub fn sub_resource(self) -> Option<&'a str> {
        self.0.sub_resource.as_deref()
    }

    pub fn user_info(self) -> &'a UserInfo {
        &self.0.user_info
    }

    pub fn dry_run(self) -> bool {
        self.0.dry_run
    }

    /// The answer to this request (its uid), allowing it.
    pub fn response(self) -> AdmissionResponse {
        AdmissionResponse::from(self.0)
    }

    /// The request's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`), as sent.
    pub fn options(self) -> Option<&'a serde_json::Value> {
        self.0.options.as_ref().map(|options| &options.0)
    }

    /// The write's `options.fieldManager`, if it names one.
    fn field_manager(self) -> Option<&'a str> {
        self.0
            .options
            .as_ref()
            .and_then(|options| options.0.get("fieldManager"))
            .and_then(|v| v.as_str())
            .filter(|fm| !fm.is_empty())
    }
}

/// The server's one-pass reading could not give what was asked of a review's objects
/// (`review::lazy`): what was decided from it is void, and the review is read whole and
/// decided again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the review's objects could not be read in one pass")]
pub struct FellBack;

/// Facts whose objects are read whole ([`RequestFacts::whole`]), so that nothing asked of
/// them can fall back: what work whose effects cannot be taken back is given.
#[derive(Clone, Copy, Debug)]
pub struct WholeFacts<'f, 'a>(&'f RequestFacts<'a>);

impl<'f, 'a> WholeFacts<'f, 'a> {
    /// Facts a [`Whole`](crate::reading::Whole) reading vouches for: read whole from the start.
    pub(crate) fn read_whole_already(facts: &'f RequestFacts<'a>) -> Self {
        debug_assert!(!facts.fell_back());
        WholeFacts(facts)
    }
}

impl<'a> std::ops::Deref for WholeFacts<'_, 'a> {
    type Target = RequestFacts<'a>;

    fn deref(&self) -> &RequestFacts<'a> {
        self.0
    }
}

/// What a review says about its request, borrowed from it where it can be.
#[derive(Clone, Debug)]
pub struct RequestFacts<'a> {
    request: RequestEnvelope<'a>,
    object: Option<ReviewObject<'a>>,
    old_object: Option<ReviewObject<'a>>,
    username: &'a str,
    /// The username made safe to repeat, or [`ANONYMOUS`].
    who: Cow<'a, str>,
    field_manager: Option<&'a str>,
    is_namespace_object: bool,
    scope_namespace: Option<&'a str>,
    subresource: &'a str,
}

impl<'a> RequestFacts<'a> {
    /// A request whose objects are read whole (or absent).
    pub fn new(request: &'a AdmissionRequest<DynamicObject>) -> Self {
        Self::with_objects(
            request,
            request.object.as_ref().map(ReviewObject::Whole),
            request.old_object.as_ref().map(ReviewObject::Whole),
        )
    }

    /// A review as the server reads it, its objects' remainders parsed on first use.
    pub fn of_lazy(review: &'a LazyReview<'a>) -> Self {
        Self::with_objects(
            review.request(),
            review.object().map(ReviewObject::Lazy),
            review.old_object().map(ReviewObject::Lazy),
        )
    }

    fn with_objects(
        request: &'a AdmissionRequest<DynamicObject>,
        object: Option<ReviewObject<'a>>,
        old_object: Option<ReviewObject<'a>>,
    ) -> Self {
        let request = RequestEnvelope(request);
        let username = request.user_info().username.as_deref().unwrap_or("");
        RequestFacts {
            request,
            object,
            old_object,
            username,
            who: match username {
                "" => Cow::Borrowed(ANONYMOUS),
                name => echo(name, MAX_NAME_CHARS),
            },
            field_manager: request.field_manager(),
            is_namespace_object: is_namespace_object(request),
            scope_namespace: scope_namespace(request),
            subresource: request.sub_resource().unwrap_or(""),
        }
    }

    /// The envelope: the objects are read through [`Self::object`] and [`Self::old_object`].
    pub fn request(&self) -> RequestEnvelope<'a> {
        self.request
    }

    /// The object written (`object`); None for a DELETE.
    pub fn object(&self) -> Option<ReviewObject<'a>> {
        self.object
    }

    /// The stored object (`oldObject`); None for a CREATE.
    pub fn old_object(&self) -> Option<ReviewObject<'a>> {
        self.old_object
    }

    /// Whether a rule asked for an object's remainder that the server's one-pass reading could
    /// not give (`review::lazy`): a decision made with these facts is void, and the server
    /// decides the review again on the two-step path.
    pub fn fell_back(&self) -> bool {
        [self.object, self.old_object]
            .into_iter()
            .flatten()
            .any(|o| matches!(o, ReviewObject::Lazy(lazy) if lazy.fell_back()))
    }

    /// Reads both objects whole, before work whose effects cannot be taken back (a record
    /// written, a settlement queued); [`FellBack`] when that made the facts fall back.
    pub fn whole(&self) -> Result<WholeFacts<'_, 'a>, FellBack> {
        for object in [self.object, self.old_object].into_iter().flatten() {
            object.whole();
        }
        self.stands()?;
        Ok(WholeFacts(self))
    }

    /// Whether what was decided from these facts stands: [`FellBack`] when a rule asked for
    /// an object's remainder that the one-pass reading could not give.
    pub fn stands(&self) -> Result<(), FellBack> {
        if self.fell_back() {
            return Err(FellBack);
        }
        Ok(())
    }

    /// The username as sent; "" for an anonymous client.
    pub fn username(&self) -> &'a str {
        self.username
    }

    /// The writer in a sentence: the username made safe to repeat, or "an anonymous client".
    pub fn who(&self) -> &str {
        &self.who
    }

    /// The field manager the client named (`?fieldManager=`); None when it named none.
    pub fn field_manager(&self) -> Option<&'a str> {
        self.field_manager
    }

    /// Whether the object written is a Namespace (or one of its subresources).
    pub fn is_namespace_object(&self) -> bool {
        self.is_namespace_object
    }

    /// The namespace that scopes the write: the request's, or for a Namespace object its own
    /// name. None for other cluster-scoped objects.
    pub fn scope_namespace(&self) -> Option<&'a str> {
        self.scope_namespace
    }

    /// The namespace the object lives in; None for a cluster-scoped object. The API server sets
    /// a Namespace's own name as the request's namespace, but a Namespace is cluster-scoped:
    /// an Event about it that named a namespace would not be found by `kubectl describe`.
    pub fn object_namespace(&self) -> Option<&'a str> {
        self.scope_namespace.filter(|_| !self.is_namespace_object)
    }

    /// The subresource the request names: "" for the object itself.
    pub fn subresource(&self) -> &'a str {
        self.subresource
    }

    /// The operation, when it is one a policy can guard (not CONNECT).
    pub fn guarded_operation(&self) -> Option<GuardedOperation> {
        match self.request.operation() {
            Operation::Create => Some(GuardedOperation::Create),
            Operation::Update => Some(GuardedOperation::Update),
            Operation::Delete => Some(GuardedOperation::Delete),
            Operation::Connect => None,
        }
    }

    /// "CREATE", "UPDATE", "DELETE", "CONNECT": as the API server and the audit log name it.
    pub fn operation_name(&self) -> &'static str {
        match self.request.operation() {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// "create", "update", "delete", "connect to": what the writer may not do.
    pub fn operation_word(&self) -> &'static str {
        match self.request.operation() {
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Connect => "connect to",
        }
    }

    /// "created", "changed", "deleted", "connected to": what the writer did.
    pub fn past_word(&self) -> &'static str {
        match self.request.operation() {
            Operation::Create => "created",
            Operation::Update => "changed",
            Operation::Delete => "deleted",
            Operation::Connect => "connected to",
        }
    }

    /// The apiVersion of the resource written (`apps/v1`, `v1`): for a subresource such as
    /// `scale`, the parent's, never the Scale's `autoscaling/v1`.
    pub fn api_version(&self) -> String {
        let resource = self.request.resource();
        if resource.group.is_empty() {
            resource.version.clone()
        } else {
            format!("{}/{}", resource.group, resource.version)
        }
    }

    /// Where the object written is stored, to read it back: for a subresource, its parent.
    /// None when the request names no object (a CREATE with generateName).
    pub fn stored_address(&self) -> Option<StoredAddress> {
        let request = self.request;
        if request.name().is_empty() {
            return None;
        }
        let resource = request.resource();
        Some(StoredAddress {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.resource.clone(),
            namespace: self.object_namespace().map(str::to_owned),
            name: request.name().to_owned(),
        })
    }

    /// The uid of the object written: from the object, or the old object for a DELETE. For
    /// `scale` the Scale's uid is its parent's.
    pub fn object_uid(&self) -> Option<&'a str> {
        [self.object, self.old_object]
            .into_iter()
            .flatten()
            .find_map(|o| o.metadata().uid.as_deref())
    }

    /// "Deployment prod-payments/api", "Deployment prod-payments/api (scale)", "Service
    /// prod-payments/api (through status)", "Namespace prod-orders". `kind` is the kind
    /// resolved for the write, `subresource` the one it is judged as, and `through` the
    /// subresource a write judged as one to the object itself came through.
    pub fn object_words(&self, kind: &str, subresource: &str, through: Option<&str>) -> String {
        let name = echo(self.request.name(), MAX_NAME_CHARS);
        let mut words = match self.object_namespace() {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        if let Some(through) = through {
            words.push_str(&format!(" (through {through})"));
        } else if !subresource.is_empty() {
            words.push_str(&format!(" ({subresource})"));
        }
        words
    }

    /// The object an Event is about: the object written, or for a subresource its parent, of
    /// `kind` (which the decision resolved). None when the request names no object (a CREATE
    /// with generateName): the API server would refuse an Event about it. No resourceVersion:
    /// it changes with every write and would split an Event series.
    pub fn regarding(&self, kind: &str) -> Option<ObjectReference> {
        if self.request.name().is_empty() {
            return None;
        }
        Some(ObjectReference {
            api_version: Some(self.api_version()),
            kind: Some(kind.to_owned()),
            namespace: self.object_namespace().map(str::to_owned),
            name: Some(self.request.name().to_owned()),
            uid: self.object_uid().map(str::to_owned),
            ..ObjectReference::default()
        })
    }
}

/// Where an object is stored in the API: its resource (group, version, plural), namespace and
/// name. What driftgate reads back to confirm what a review claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredAddress {
    pub group: String,
    pub version: String,
    pub plural: String,
    /// None for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
}

impl StoredAddress {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// An admitted write to read back: the API server stores it a moment after the answer, and only
/// what it stored is the truth (a review is a claim: anyone who reaches the port can POST one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmittedWrite {
    pub address: StoredAddress,
    pub uid: String,
    /// The object's resourceVersion before the write: until the stored object has another,
    /// the write has not landed.
    pub old_resource_version: Option<String>,
    pub deleted: bool,
}

/// What the object read back says of an [`AdmittedWrite`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Landed<'a> {
    /// Still the version the write was made to: not landed (yet, or ever: refused by another
    /// webhook, or never made, for a forged review).
    NotYet,
    /// Gone, replaced (another uid) or, for a delete, being deleted.
    Gone,
    /// Stored at a newer version.
    Object(&'a DynamicObject),
}

impl AdmittedWrite {
    /// None for a dry run (nothing is stored) or a write without a name or uid.
    pub fn of(facts: &RequestFacts<'_>) -> Option<AdmittedWrite> {
        let request = facts.request();
        if request.dry_run() {
            return None;
        }
        Some(AdmittedWrite {
            address: facts.stored_address()?,
            uid: facts.object_uid().filter(|uid| !uid.is_empty())?.to_owned(),
            old_resource_version: facts
                .old_object()
                .and_then(|old| old.metadata().resource_version.clone()),
            deleted: request.operation() == Operation::Delete,
        })
    }

    /// What `live` (None: not found) says of this write.
    pub fn landed<'a>(&self, live: Option<&'a DynamicObject>) -> Landed<'a> {
        let Some(live) = live else {
            return Landed::Gone;
        };
        if live.metadata.uid.as_deref() != Some(self.uid.as_str())
            || (self.deleted && live.metadata.deletion_timestamp.is_some())
        {
            return Landed::Gone;
        }
        if live.metadata.resource_version.is_some()
            && live.metadata.resource_version == self.old_resource_version
        {
            return Landed::NotYet;
        }
        Landed::Object(live)
    }
}

/// Whether `request` writes a Namespace: read from the envelope alone, before its objects are.
pub fn is_namespace_object(request: RequestEnvelope<'_>) -> bool {
    request.kind().group.is_empty() && request.kind().kind == "Namespace"
}

/// The namespace that scopes `request` (see [`RequestFacts::scope_namespace`]); from the
/// envelope alone, so that the server can look the Namespace up before reading the objects.
pub fn scope_namespace(request: RequestEnvelope<'_>) -> Option<&str> {
    match request.namespace() {
        Some(ns) if !ns.is_empty() => Some(ns),
        _ if is_namespace_object(request) && !request.name().is_empty() => Some(request.name()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(value: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": value,
        });
        let review: kube_core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(review).expect("a review");
        review.try_into().expect("a request")
    }

    fn base(extra: serde_json::Value) -> serde_json::Value {
        let mut value = json!({
            "uid": "r-1",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "api",
            "namespace": "prod-payments",
            "operation": "UPDATE",
            "userInfo": {"username": "bob"},
        });
        for (key, v) in extra.as_object().expect("an object") {
            value[key] = v.clone();
        }
        value
    }

    #[test]
    fn a_namespace_scopes_itself_but_lives_in_no_namespace() {
        let ns = request(base(json!({
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "prod-orders",
            "namespace": "prod-orders",
        })));
        let facts = RequestFacts::new(&ns);
        assert!(facts.is_namespace_object());
        assert_eq!(facts.scope_namespace(), Some("prod-orders"));
        assert_eq!(facts.object_namespace(), None);
        assert_eq!(
            facts.object_words("Namespace", "", None),
            "Namespace prod-orders"
        );
        let regarding = facts.regarding("Namespace").expect("named");
        assert_eq!(regarding.namespace, None);
        assert_eq!(regarding.api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn a_scale_is_about_its_parent() {
        let scale = request(base(json!({
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "subResource": "scale",
            "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                          "metadata": {"name": "api", "uid": "u-1"}},
            "options": {"fieldManager": "kubectl"},
        })));
        let facts = RequestFacts::new(&scale);
        assert_eq!(facts.api_version(), "apps/v1");
        assert_eq!(facts.object_uid(), Some("u-1"));
        assert_eq!(facts.field_manager(), Some("kubectl"));
        assert_eq!(
            facts.object_words("Deployment", facts.subresource(), None),
            "Deployment prod-payments/api (scale)"
        );
        assert_eq!(
            facts.object_words("Deployment", "", Some("status")),
            "Deployment prod-payments/api (through status)"
        );
    }

    #[test]
    fn who_is_escaped_or_anonymous() {
        let forged = request(base(json!({"userInfo": {"username": "bob\nuser=alice"}})));
        assert_eq!(RequestFacts::new(&forged).who(), "bob\\nuser=alice");
        let anonymous = request(base(json!({"userInfo": {}})));
        assert_eq!(RequestFacts::new(&anonymous).who(), ANONYMOUS);
        assert_eq!(RequestFacts::new(&anonymous).username(), "");
    }

    #[test]
    fn an_unnamed_create_has_nothing_to_be_about() {
        let create = request(base(json!({"name": "", "operation": "CREATE"})));
        let facts = RequestFacts::new(&create);
        assert!(facts.regarding("Deployment").is_none());
        assert_eq!(facts.operation_word(), "create");
        assert_eq!(facts.past_word(), "created");
        assert_eq!(facts.operation_name(), "CREATE");
    }
}
