//! The request path's reading of a review: one pass over the body that keeps what every
//! decision reads and leaves the rest as slices of the body.
//!
//! The pass reads the envelope (who, what, where, which operation) and, of each object, the
//! top-level fields as slices, and `metadata`'s fields as slices, `managedFields` apart.
//! Nothing is built yet: a write no policy guards needs only the object's name. A guarded
//! write then reads each object's metadata (labels, annotations, owners, finalizers: what the
//! window, delegation and deletion rules read), and the remainder, `spec` with managedFields,
//! only when a rule asks for the whole object (a field diff, a suspension field, a record).
//! A 30 KB Flux apply is decided without building either object (tests/benches/BENCHMARKS.md).
//!
//! Anything this path cannot read the way [`super::parse_envelope`] would, it does not judge:
//! a body it cannot parse, an object whose metadata is not valid, and an object nested deeper
//! than serde_json reads on a thread's stack (128 levels, found only when the remainder is
//! parsed) make [`LazyReview::fell_back`] true, and the server decides the review again on the
//! two-step path, which reads any depth on a grown stack and says why an object is unreadable.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube_core::admission::AdmissionRequest;
use kube_core::{DynamicObject, TypeMeta};
use serde::de::value::MapDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{ADMISSION_API_VERSION, ADMISSION_KIND, name_from_objects};

/// A review read in one pass: the envelope built, the objects as slices of the body.
pub struct LazyEnvelope<'a> {
    request: AdmissionRequest<DynamicObject>,
    object: Option<ObjectParts<'a>>,
    old_object: Option<ObjectParts<'a>>,
}

/// A review whose objects' metadata is read and whose remainder is read on first use.
pub struct LazyReview<'a> {
    request: AdmissionRequest<DynamicObject>,
    object: Option<LazyObject<'a>>,
    old_object: Option<LazyObject<'a>>,
}

/// One object of a review: its apiVersion, kind and metadata (without managedFields) read, the
/// rest kept as slices of the body until [`LazyObject::whole`] is asked for.
pub struct LazyObject<'a> {
    /// The object without its remainder: `data` is null, `metadata.managedFields` unset.
    head: DynamicObject,
    managed_fields: Option<&'a RawValue>,
    rest: Vec<(Cow<'a, str>, &'a RawValue)>,
    whole: OnceLock<DynamicObject>,
    /// Set when the remainder could not be read here (see the module's documentation).
    unread: AtomicBool,
}

/// An object's fields as slices of the body.
struct ObjectParts<'a> {
    metadata: Option<Vec<(Cow<'a, str>, &'a RawValue)>>,
    managed_fields: Option<&'a RawValue>,
    rest: Vec<(Cow<'a, str>, &'a RawValue)>,
}

/// Parses a review in one pass. `None`: the body is not one this path reads, and the two-step
/// path should (it reads anything valid and says what is not).
pub fn parse_lazily(body: &[u8]) -> Option<LazyEnvelope<'_>> {
    let review: ReviewParts<'_> = serde_json::from_slice(body).ok()?;
    if review.api_version != ADMISSION_API_VERSION || review.kind != ADMISSION_KIND {
        return None;
    }
    let parts = review.request?;
    let fields = parts.fields.into_iter();
    let mut request =
        AdmissionRequest::<DynamicObject>::deserialize(MapDeserializer::new(fields)).ok()?;
    request.types = TypeMeta {
        api_version: ADMISSION_API_VERSION.to_owned(),
        kind: ADMISSION_KIND.to_owned(),
    };
    Some(LazyEnvelope {
        request,
        object: parts.object,
        old_object: parts.old_object,
    })
}

impl<'a> LazyEnvelope<'a> {
    /// The request without its objects (`object` and `oldObject` are `None`).
    pub fn request(&self) -> &AdmissionRequest<DynamicObject> {
        &self.request
    }

    /// Reads each object's apiVersion, kind and metadata. `None`: an object's are not valid,
    /// and the two-step path should say why.
    pub fn read_heads(self) -> Option<LazyReview<'a>> {
        let head = |parts: Option<ObjectParts<'a>>| match parts {
            None => Some(None),
            Some(parts) => LazyObject::read(parts).map(Some),
        };
        let mut review = LazyReview {
            request: self.request,
            object: head(self.object)?,
            old_object: head(self.old_object)?,
        };
        name_from_objects(
            &mut review.request.name,
            review.old_object.as_ref(),
            review.object.as_ref(),
            |o| o.head.metadata.name.clone(),
        );
        Some(review)
    }

    /// The request for a write no policy guards: only the object's name is read from the
    /// objects, as in [`super::Envelope::without_objects`].
    pub fn without_objects(self) -> AdmissionRequest<DynamicObject> {
        let mut request = self.request;
        name_from_objects(&mut request.name, self.old_object, self.object, |parts| {
            let (_, raw) = parts.metadata?.into_iter().find(|(key, _)| key == "name")?;
            serde_json::from_str::<String>(raw.get()).ok()
        });
        request
    }
}

impl<'a> LazyReview<'a> {
    /// The request without its objects (`object` and `oldObject` are `None`).
    pub fn request(&self) -> &AdmissionRequest<DynamicObject> {
        &self.request
    }

    pub fn object(&self) -> Option<&LazyObject<'a>> {
        self.object.as_ref()
    }

    pub fn old_object(&self) -> Option<&LazyObject<'a>> {
        self.old_object.as_ref()
    }

    /// Whether a rule asked for an object's remainder and this path could not read it: the
    /// decision made with this review is void, and the review is decided on the two-step path.
    pub fn fell_back(&self) -> bool {
        [&self.object, &self.old_object]
            .into_iter()
            .flatten()
            .any(LazyObject::fell_back)
    }

    /// Whether a rule read either object whole (for tests and benchmarks of this laziness).
    pub fn any_read_whole(&self) -> bool {
        [&self.object, &self.old_object]
            .into_iter()
            .flatten()
            .any(|o| o.whole.get().is_some())
    }
}

impl<'a> LazyObject<'a> {
    fn read(parts: ObjectParts<'a>) -> Option<Self> {
        let ObjectParts {
            metadata,
            managed_fields,
            mut rest,
        } = parts;
        let metadata = match metadata {
            None => ObjectMeta::default(),
            Some(fields) => {
                ObjectMeta::deserialize(MapDeserializer::new(fields.into_iter())).ok()?
            }
        };
        Some(LazyObject {
            head: DynamicObject {
                types: type_meta(&mut rest),
                metadata,
                data: Value::Null,
            },
            managed_fields,
            rest,
            whole: OnceLock::new(),
            unread: AtomicBool::new(false),
        })
    }

    /// Whether [`Self::whole`] could not read the remainder here, and gave the head instead.
    pub fn fell_back(&self) -> bool {
        self.unread.load(Ordering::Relaxed)
    }

    /// The apiVersion, kind and metadata, managedFields left out; `data` is null.
    pub fn head(&self) -> &DynamicObject {
        &self.head
    }

    /// The object as the API server sent it, read on first use. Should it not be readable here
    /// (see the module's documentation), the head stands in and the review falls back.
    pub fn whole(&self) -> &DynamicObject {
        self.whole.get_or_init(|| match self.parse_whole() {
            Ok(object) => object,
            Err(_) => {
                self.unread.store(true, Ordering::Relaxed);
                self.head.clone()
            }
        })
    }

    fn parse_whole(&self) -> Result<DynamicObject, serde_json::Error> {
        let mut data = Map::with_capacity(self.rest.len());
        for (key, raw) in &self.rest {
            data.insert(key.clone().into_owned(), serde_json::from_str(raw.get())?);
        }
        let mut metadata = self.head.metadata.clone();
        metadata.managed_fields = self
            .managed_fields
            .map(|raw| serde_json::from_str::<Option<Vec<ManagedFieldsEntry>>>(raw.get()))
            .transpose()?
            .flatten();
        Ok(DynamicObject {
            types: self.head.types.clone(),
            metadata,
            data: Value::Object(data),
        })
    }
}

/// Takes `apiVersion` and `kind` out of the fields when both are strings, as
/// [`super::parse_object`] does; otherwise they stay in the data.
fn type_meta(rest: &mut Vec<(Cow<'_, str>, &RawValue)>) -> Option<TypeMeta> {
    let text = |key: &str| {
        rest.iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, raw)| serde_json::from_str::<String>(raw.get()).ok())
    };
    let (api_version, kind) = (text("apiVersion")?, text("kind")?);
    rest.retain(|(key, _)| key != "apiVersion" && key != "kind");
    Some(TypeMeta { api_version, kind })
}

/// The outer AdmissionReview. Unknown fields (`response`) are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewParts<'a> {
    #[serde(borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    request: Option<RequestParts<'a>>,
}

/// The request's fields as slices, its objects apart.
struct RequestParts<'a> {
    fields: Vec<(Cow<'a, str>, &'a RawValue)>,
    object: Option<ObjectParts<'a>>,
    old_object: Option<ObjectParts<'a>>,
}

/// A key, borrowed from the body unless it holds an escape.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for KeyVisitor<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RequestParts<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RequestVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for RequestVisitor<'a> {
            type Value = RequestParts<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an AdmissionRequest")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut parts = RequestParts {
                    fields: Vec::with_capacity(16),
                    object: None,
                    old_object: None,
                };
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "object" => parts.object = map.next_value()?,
                        "oldObject" => parts.old_object = map.next_value()?,
                        _ => parts.fields.push((key, map.next_value()?)),
                    }
                }
                Ok(parts)
            }
        }
        deserializer.deserialize_map(RequestVisitor(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ObjectParts<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for ObjectVisitor<'a> {
            type Value = ObjectParts<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut parts = ObjectParts {
                    metadata: None,
                    managed_fields: None,
                    rest: Vec::with_capacity(4),
                };
                while let Some(Key(key)) = map.next_key()? {
                    if key == "metadata" {
                        let MetadataParts {
                            fields,
                            managed_fields,
                        } = map.next_value()?;
                        parts.metadata = Some(fields);
                        parts.managed_fields = managed_fields;
                    } else {
                        parts.rest.push((key, map.next_value()?));
                    }
                }
                Ok(parts)
            }
        }
        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// `metadata`'s fields as slices, `managedFields` apart.
struct MetadataParts<'a> {
    fields: Vec<(Cow<'a, str>, &'a RawValue)>,
    managed_fields: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for MetadataParts<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MetadataVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for MetadataVisitor<'a> {
            type Value = MetadataParts<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object's metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut parts = MetadataParts {
                    fields: Vec::with_capacity(12),
                    managed_fields: None,
                };
                while let Some(Key(key)) = map.next_key()? {
                    let raw = map.next_value()?;
                    if key == "managedFields" {
                        parts.managed_fields = Some(raw);
                    } else {
                        parts.fields.push((key, raw));
                    }
                }
                Ok(parts)
            }
        }
        deserializer.deserialize_map(MetadataVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::parse_review;
    use crate::review::tests::{COLLECTION_DELETE, fixtures};

    fn review_text(body: &str) -> String {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{
            "uid":"u","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},
            "resource":{{"group":"","version":"v1","resource":"configmaps"}},"namespace":"dev",
            "operation":"UPDATE","userInfo":{{"username":"bob"}},{body}}}}}"#
        )
    }

    /// The one-pass reading gives, head and whole, what the two-step parse gives.
    #[test]
    fn reads_every_fixture_as_the_two_step_parse_does() {
        let fixtures = fixtures();
        assert!(fixtures.len() >= 30);
        for (name, body) in fixtures {
            let expected = parse_review(&body).unwrap();
            let review = parse_lazily(&body).unwrap().read_heads().unwrap();
            let mut envelope = serde_json::to_value(&expected).unwrap();
            for (side, object) in [
                ("object", review.object()),
                ("oldObject", review.old_object()),
            ] {
                let whole = object.map(|o| serde_json::to_value(o.whole()).unwrap());
                let sent = envelope.get(side).filter(|v| !v.is_null());
                assert_eq!(whole.as_ref(), sent, "{name}: {side}");
                if let Some(object) = object {
                    let mut head = serde_json::to_value(object.whole()).unwrap();
                    head["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .remove("managedFields");
                    let mut got = serde_json::to_value(object.head()).unwrap();
                    got.as_object_mut().unwrap().remove("managedFields");
                    for key in ["apiVersion", "kind", "metadata"] {
                        assert_eq!(got.get(key), head.get(key), "{name}: {side}.{key}");
                    }
                }
                envelope.as_object_mut().unwrap().remove(side);
            }
            assert!(!review.fell_back(), "{name}");
            let mut got = serde_json::to_value(review.request()).unwrap();
            got.as_object_mut().unwrap().remove("object");
            got.as_object_mut().unwrap().remove("oldObject");
            assert_eq!(got, envelope, "{name}");
            assert_eq!(review.request().types, expected.types, "{name}");
        }
    }

    #[test]
    fn the_remainder_is_read_only_when_asked_for() {
        let body = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/bench-deployment-update-30k.json"
        ))
        .unwrap();
        let review = parse_lazily(&body).unwrap().read_heads().unwrap();
        let head = review.object().unwrap().head();
        assert!(head.metadata.labels.is_some() && head.metadata.managed_fields.is_none());
        assert!(head.data.is_null() && !review.any_read_whole());
        let whole = review.object().unwrap().whole();
        assert!(whole.metadata.managed_fields.is_some() && whole.data["spec"].is_object());
        assert!(review.any_read_whole() && !review.fell_back());
    }

    /// What this path cannot read it leaves to the two-step path, which says why.
    #[test]
    fn what_it_cannot_read_falls_back() {
        let not_a_review = br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#;
        assert!(parse_lazily(not_a_review).is_none());
        let bad_metadata = review_text(r#""object":{"metadata":{"labels":"x"}},"oldObject":null"#);
        let envelope = parse_lazily(bad_metadata.as_bytes()).unwrap();
        assert!(envelope.read_heads().is_none());
        // Deeper than serde_json's limit: the head is read, the remainder falls back.
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let deep = review_text(&format!(
            r#""object":{{"metadata":{{"name":"a","labels":{{"k":"v"}}}},"data":{{"d":"{}"}},"deep":{deep}}},"oldObject":null"#,
            "x"
        ));
        let review = parse_lazily(deep.as_bytes()).unwrap().read_heads().unwrap();
        let object = review.object().unwrap();
        assert_eq!(object.head().metadata.name.as_deref(), Some("a"));
        assert!(!review.fell_back());
        assert!(object.whole().data.is_null() && review.fell_back());
        // managedFields are read with the remainder: an invalid entry falls back then.
        let forged = review_text(
            r#""object":{"metadata":{"name":"a","managedFields":[{"time":7}]}},"oldObject":null"#,
        );
        let review = parse_lazily(forged.as_bytes())
            .unwrap()
            .read_heads()
            .unwrap();
        assert!(
            review
                .object()
                .unwrap()
                .head()
                .metadata
                .managed_fields
                .is_none()
        );
        assert!(!review.fell_back());
        review.object().unwrap().whole();
        assert!(review.fell_back());
    }

    #[test]
    fn a_collection_delete_is_named_from_its_object() {
        let body = COLLECTION_DELETE;
        assert_eq!(
            parse_lazily(body).unwrap().without_objects().name,
            "settings"
        );
        let review = parse_lazily(body).unwrap().read_heads().unwrap();
        assert_eq!(review.request().name, "settings");
    }
}
