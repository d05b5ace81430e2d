//! Reading AdmissionReviews as the API server sends them, and Kubernetes objects from files.
//!
//! A review is read in two steps. The envelope (who, what, where, which operation) is small
//! and always parses; the objects can be megabytes and nested as deep as Kubernetes allows
//! (its JSON decoder takes 10,000 levels), so they stay unparsed until a policy may guard the
//! write, and are then parsed on a stack grown to their depth. An object that deep would also
//! overflow the stack when dropped, so [`Review`] takes deep objects apart iteratively.

use std::collections::BTreeMap;
use std::ops::Deref;

pub mod lazy;

use kube_core::admission::AdmissionRequest;
use kube_core::{DynamicObject, TypeMeta};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub const ADMISSION_KIND: &str = "AdmissionReview";

/// Objects nested deeper than this are parsed and reviewed on a grown stack, and taken apart
/// iteratively when dropped. Real objects are a few dozen levels deep; serde_json's own
/// recursion limit, which fits any thread's stack, is 128.
pub const SHALLOW_DEPTH: usize = 64;

/// Why a body is not an AdmissionReview driftgate can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not a valid AdmissionReview: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "apiVersion \"{0}\" is not supported: driftgate answers {ADMISSION_API_VERSION} AdmissionReview only (set admissionReviewVersions: [v1])"
    )]
    UnsupportedVersion(String),
    #[error("kind \"{0}\" is not an AdmissionReview")]
    WrongKind(String),
    #[error("the AdmissionReview has no request")]
    MissingRequest,
    #[error(transparent)]
    Object(#[from] ObjectError),
}

/// An object inside a valid envelope that is not a Kubernetes object.
#[derive(Debug, thiserror::Error)]
#[error("the request's {field} is not a Kubernetes object: {reason}")]
pub struct ObjectError {
    /// `object` or `oldObject`.
    pub field: &'static str,
    pub reason: String,
}

/// A review's envelope, its objects not yet parsed (slices of the request body).
pub struct Envelope<'a> {
    review: Review,
    object: Option<&'a RawValue>,
    old_object: Option<&'a RawValue>,
}

/// A review whose objects, once read, are dropped without recursion however deep they are.
pub struct Review {
    /// Always `Some`; taken only by [`Review::into_request`]. Boxed: a review is moved
    /// through results, and the request is over a kilobyte.
    request: Option<Box<AdmissionRequest<DynamicObject>>>,
    depth: usize,
}

/// A review whose objects could not be read: its envelope, and why.
pub struct Unreadable {
    pub review: Review,
    pub error: ObjectError,
}

/// The outer AdmissionReview, its request's fields kept raw (one pass over the body, which
/// skips the objects without recursion). Unknown fields (`response`) are skipped, as the API
/// server may add some.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawReview<'a> {
    api_version: String,
    kind: String,
    #[serde(borrow, default)]
    request: Option<BTreeMap<String, &'a RawValue>>,
}

/// Parses an `admission.k8s.io/v1` AdmissionReview's envelope, leaving its objects unparsed.
pub fn parse_envelope<'a>(body: &'a [u8]) -> Result<Envelope<'a>, ReviewError> {
    let review: RawReview<'a> = match serde_json::from_slice(body) {
        Ok(review) => review,
        // An older review version may fail to parse as v1; say which version it was, which is
        // the actionable part. Only the error path pays for the second parse.
        Err(error) => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Header {
                api_version: String,
            }
            return Err(match serde_json::from_slice::<Header>(body) {
                Ok(header) if header.api_version != ADMISSION_API_VERSION => {
                    ReviewError::UnsupportedVersion(header.api_version)
                }
                _ => ReviewError::Json(error),
            });
        }
    };
    if review.api_version != ADMISSION_API_VERSION {
        return Err(ReviewError::UnsupportedVersion(review.api_version));
    }
    if review.kind != ADMISSION_KIND {
        return Err(ReviewError::WrongKind(review.kind));
    }
    // The objects are set aside, and the rest of the request (a few hundred bytes) is parsed
    // as kube's AdmissionRequest.
    let mut fields = review.request.ok_or(ReviewError::MissingRequest)?;
    let present = |value: Option<&'a RawValue>| value.filter(|raw| raw.get() != "null");
    let object = present(fields.remove("object"));
    let old_object = present(fields.remove("oldObject"));
    let mut request: AdmissionRequest<DynamicObject> =
        serde_json::from_str(&serde_json::to_string(&fields)?)?;
    request.types = TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    };
    Ok(Envelope {
        review: Review {
            request: Some(Box::new(request)),
            depth: 0,
        },
        object,
        old_object,
    })
}

impl<'a> Envelope<'a> {
    /// The request without its objects (`object` and `oldObject` are `None`).
    pub fn request(&self) -> &AdmissionRequest<DynamicObject> {
        &self.review
    }

    /// Parses the objects, at any depth.
    pub fn read_objects(self) -> Result<Review, Unreadable> {
        let Envelope {
            mut review,
            object,
            old_object,
        } = self;
        review.depth = [object, old_object]
            .into_iter()
            .flatten()
            .map(|raw| nesting(raw.get()))
            .max()
            .unwrap_or(0);
        let parsed = if review.depth > MAX_DEPTH {
            Err(ObjectError {
                field: "object",
                reason: format!(
                    "it is nested {} levels deep, more than the {MAX_DEPTH} Kubernetes accepts",
                    review.depth
                ),
            })
        } else {
            // serde_json recurses once per level, and drops a half-read value recursively too.
            let stack = stack_for(review.depth);
            stacker::maybe_grow(stack, stack, || {
                let object = parse_field("object", object)?;
                Ok((object, parse_field("oldObject", old_object)?))
            })
        };
        let (object, old_object) = match parsed {
            Ok(objects) => objects,
            Err(error) => return Err(Unreadable { review, error }),
        };
        let request = review.request_mut();
        request.object = object;
        request.old_object = old_object;
        name_from_objects(
            &mut request.name,
            request.old_object.as_ref(),
            request.object.as_ref(),
            |o| o.metadata.name.clone(),
        );
        Ok(review)
    }

    /// The review without its objects, for a write no policy guards: only the object's name is
    /// read from them (a DELETE of a collection names it only there), which skips the rest of
    /// the object without recursion.
    pub fn without_objects(self) -> Review {
        #[derive(Deserialize)]
        struct Named {
            #[serde(default)]
            metadata: Option<Name>,
        }
        #[derive(Deserialize)]
        struct Name {
            #[serde(default)]
            name: Option<String>,
        }
        let mut review = self.review;
        name_from_objects(
            &mut review.request_mut().name,
            self.old_object,
            self.object,
            |raw| {
                serde_json::from_str::<Named>(raw.get())
                    .ok()?
                    .metadata?
                    .name
            },
        );
        review
    }
}

impl Review {
    /// How deeply the objects nest (0 when not read).
    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn into_request(mut self) -> AdmissionRequest<DynamicObject> {
        *self.request.take().expect("a review holds its request")
    }

    fn request_mut(&mut self) -> &mut AdmissionRequest<DynamicObject> {
        self.request.as_mut().expect("a review holds its request")
    }
}

impl Deref for Review {
    type Target = AdmissionRequest<DynamicObject>;

    fn deref(&self) -> &Self::Target {
        self.request.as_ref().expect("a review holds its request")
    }
}

impl Drop for Review {
    fn drop(&mut self) {
        if self.depth <= SHALLOW_DEPTH {
            return;
        }
        if let Some(request) = self.request.as_mut() {
            for object in [request.object.take(), request.old_object.take()]
                .into_iter()
                .flatten()
            {
                dismantle_object(object);
            }
        }
    }
}

fn parse_field(
    field: &'static str,
    raw: Option<&RawValue>,
) -> Result<Option<DynamicObject>, ObjectError> {
    raw.map(|raw| {
        parse_object(raw).map_err(|reason| ObjectError {
            field,
            reason: bounded(reason.to_string()),
        })
    })
    .transpose()
}

/// serde's errors quote the offending value, which the client chose: the reason goes into a
/// refusal and a log line, so keep it short.
fn bounded(mut reason: String) -> String {
    const MAX: usize = 200;
    if reason.len() > MAX {
        let mut end = MAX;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// Parses one object without serde_json's recursion limit (the caller provides the stack, see
/// [`stack_for`]): first as a JSON value, then split into `apiVersion`/`kind`, `metadata` and
/// the rest, as `DynamicObject`'s own deserializer would, without its flattening, which
/// buffers and copies the whole object a second time.
pub fn parse_object(raw: &RawValue) -> Result<DynamicObject, serde_json::Error> {
    let mut reader = serde_json::Deserializer::from_str(raw.get());
    reader.disable_recursion_limit();
    let value = Value::deserialize(&mut reader)?;
    reader.end()?;
    into_object(value)
}

fn into_object(value: Value) -> Result<DynamicObject, serde_json::Error> {
    use serde::de::Error as _;
    let mut map = match value {
        Value::Object(map) => map,
        other => {
            dismantle(other);
            return Err(serde_json::Error::custom(
                "invalid type: expected a JSON object",
            ));
        }
    };
    let types = match (map.get("apiVersion"), map.get("kind")) {
        (Some(Value::String(_)), Some(Value::String(_))) => {
            let text = |value: Option<Value>| match value {
                Some(Value::String(text)) => text,
                _ => String::new(),
            };
            Some(TypeMeta {
                api_version: text(map.remove("apiVersion")),
                kind: text(map.remove("kind")),
            })
        }
        _ => None,
    };
    let metadata = match map.remove("metadata") {
        None => Default::default(),
        Some(value) => {
            // From a borrowed value, so that an error leaves it whole, to be taken apart here.
            let meta = serde::Deserialize::deserialize(&value);
            dismantle(value);
            match meta {
                Ok(meta) => meta,
                Err(error) => {
                    dismantle(Value::Object(map));
                    return Err(error);
                }
            }
        }
    };
    Ok(DynamicObject {
        types,
        metadata,
        data: Value::Object(map),
    })
}

/// How deeply a JSON text nests, counted on its bytes without parsing it (brackets outside
/// strings; the text is already known to be valid JSON).
pub fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in text.as_bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Stack enough to parse, walk, serialize, clone, compare and drop (all recursive in serde and
/// serde_json) a value nested `depth` levels deep, with room to spare for what calls them.
pub fn stack_for(depth: usize) -> usize {
    1024 * 1024 + depth.saturating_mul(STACK_PER_LEVEL)
}

/// A debug build needs 1 to 2 KiB a level for the deepest of these (tests/router.rs overflows
/// at 1 KiB), a release build less: twice the most.
const STACK_PER_LEVEL: usize = 4 * 1024;

/// Kubernetes' JSON decoder refuses objects nested deeper than this, so the API server never
/// sends one; a deeper one is not read at all.
pub const MAX_DEPTH: usize = 10_000;

/// Drops a value without recursion: each container is emptied onto a stack before it drops.
pub fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

fn dismantle_object(mut object: DynamicObject) {
    dismantle(std::mem::take(&mut object.data));
    for entry in object.metadata.managed_fields.iter_mut().flatten() {
        if let Some(fields) = entry.fields_v1.take() {
            dismantle(fields.0);
        }
    }
}

/// Parses an `admission.k8s.io/v1` AdmissionReview and returns its request, objects read.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    match parse_envelope(body)?.read_objects() {
        Ok(review) => Ok(review.into_request()),
        Err(unreadable) => Err(unreadable.error.into()),
    }
}

/// A DELETE of a collection reviews each object with an empty `name` (measured on
/// kube-apiserver 1.35; only `oldObject` names it): take the name from the object (`name_of`
/// reads it, however the object is held), so that messages, Events and backport records say
/// which object it was. A request with no named object keeps its empty name; a named one is
/// not read.
pub(crate) fn name_from_objects<T>(
    name: &mut String,
    old_object: Option<T>,
    object: Option<T>,
    name_of: impl FnMut(T) -> Option<String>,
) {
    if !name.is_empty() {
        return;
    }
    let named = [old_object, object]
        .into_iter()
        .flatten()
        .filter_map(name_of)
        .find(|n| !n.is_empty());
    if let Some(named) = named {
        *name = named;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;

    /// Every AdmissionReview fixture, by path, sorted.
    pub(crate) fn fixtures() -> Vec<(String, Vec<u8>)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
            .collect();
        out.sort();
        out
    }

    /// The two-step parse gives the request kube's own one-step parse gives.
    #[test]
    fn reads_every_fixture_as_kube_does() {
        let fixtures = fixtures();
        assert!(fixtures.len() >= 30);
        for (name, body) in fixtures {
            let expected: AdmissionRequest<DynamicObject> = serde_json::from_slice::<
                kube_core::admission::AdmissionReview<DynamicObject>,
            >(&body)
            .unwrap()
            .try_into()
            .unwrap();
            let request = parse_review(&body).unwrap();
            // kube's types hold no PartialEq for the request: compare what they serialize to.
            let mut expected = serde_json::to_value(&expected).unwrap();
            if expected["name"] == "" {
                expected["name"] = request.name.clone().into();
            }
            assert_eq!(serde_json::to_value(&request).unwrap(), expected, "{name}");
            assert_eq!(
                request.types,
                TypeMeta {
                    api_version: ADMISSION_API_VERSION.into(),
                    kind: ADMISSION_KIND.into(),
                }
            );
        }
    }

    #[test]
    fn an_unreadable_object_is_described_in_a_bounded_sentence() {
        let long = "é".repeat(100_000);
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{
            "uid":"u","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},
            "resource":{{"group":"","version":"v1","resource":"configmaps"}},"namespace":"dev",
            "operation":"CREATE","userInfo":{{"username":"bob"}},"object":{{"metadata":"{long}"}}}}}}"#
        );
        let Err(unreadable) = parse_envelope(body.as_bytes()).unwrap().read_objects() else {
            panic!("the object is read");
        };
        let reason = unreadable.error.to_string();
        assert!(reason.len() < 300, "{reason}");
        assert!(
            reason.starts_with(
                "the request's object is not a Kubernetes object: invalid type: string"
            ),
            "{reason}"
        );
    }

    #[test]
    fn nesting_counts_brackets_outside_strings() {
        for (text, depth) in [
            ("1", 0),
            ("{}", 1),
            (r#"{"a":[1,{"b":[]}]}"#, 4),
            (r#"{"a":"{[{[\"{"}"#, 1),
            (r#"["\\", ["x"]]"#, 2),
            (r#"[{"}":"]"},[[]]]"#, 3),
        ] {
            assert_eq!(nesting(text), depth, "{text}");
        }
    }

    /// One object of a DELETE of a collection, as the API server reviews it: no name in the
    /// request, the object in `oldObject` only.
    pub(crate) const COLLECTION_DELETE: &[u8] = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u","kind":{"group":"","version":"v1","kind":"ConfigMap"},
            "resource":{"group":"","version":"v1","resource":"configmaps"},"namespace":"dev",
            "operation":"DELETE","userInfo":{"username":"bob"},"object":null,
            "oldObject":{"metadata":{"name":"settings","managedFields":[{"fieldsV1":{"f:data":{}}}]},"data":{"k":"v"}}}}"#;

    #[test]
    fn a_collection_delete_is_named_from_its_object_without_reading_it() {
        let body = COLLECTION_DELETE;
        let review = parse_envelope(body).unwrap().without_objects();
        assert_eq!(review.name, "settings");
        assert!(review.old_object.is_none() && review.object.is_none());
        let review = parse_envelope(body).unwrap().read_objects().ok().unwrap();
        assert_eq!(review.name, "settings");
        assert_eq!(review.depth(), 6);
        assert!(review.object.is_none());
    }

    #[test]
    fn a_value_deeper_than_any_stack_is_dropped_without_recursion() {
        let mut value = Value::Null;
        for _ in 0..1_000_000 {
            value = Value::Array(vec![value]);
        }
        dismantle(value);
    }
}
