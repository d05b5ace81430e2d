//! The policy file as users write it (`driftgate.dev/v1alpha1`, kind `GatePolicy`).
//!
//! These types mirror the YAML exactly; [`super::compile`] turns them into the matchers the
//! decision uses, and reports every problem with its file, line and field.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

pub const API_VERSION: &str = "driftgate.dev/v1alpha1";
pub const KIND: &str = "GatePolicy";

/// A boolean written unquoted (`true`, `false`). A quoted `"no"` is a string, to JSON, to the
/// API server's schema for GatePolicy objects and to YAML 1.2 readers, however YAML 1.1 reads
/// it; read as false here, a file would mean something else than the same policy applied as an
/// object, so it is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Flag, D::Error> {
        struct Unquoted;
        impl serde::de::Visitor<'_> for Unquoted {
            type Value = Flag;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true or false, unquoted")
            }
            fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Flag, E> {
                Ok(Flag(value))
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Flag, E> {
                Err(E::custom(format!(
                    "\"{value}\" is a string, not a boolean; write true or false, unquoted"
                )))
            }
        }
        deserializer.deserialize_any(Unquoted)
    }
}

/// `serde(deserialize_with)` for a `bool` field: [`Flag`]'s rule.
pub fn unquoted_bool<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Flag::deserialize(deserializer).map(|flag| flag.0)
}

/// `serde(deserialize_with)` for an `Option<bool>` field: [`Flag`]'s rule.
pub fn unquoted_option_bool<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<bool>, D::Error> {
    Option::<Flag>::deserialize(deserializer).map(|flag| flag.map(|f| f.0))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatePolicyDocument {
    pub api_version: Spanned<String>,
    pub kind: Spanned<String>,
    pub metadata: DocumentMetadata,
    pub spec: Spanned<GatePolicySpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DocumentMetadata {
    pub name: Spanned<String>,
    /// Accepted so that policies can carry the labels and annotations tools such as kustomize add.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// Enforce denies; Audit admits with a warning and records what Enforce would have denied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum PolicyMode {
    #[default]
    Enforce,
    Audit,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GatePolicySpec {
    #[serde(default)]
    pub mode: PolicyMode,
    #[serde(default)]
    pub owner: Option<String>,
    pub namespaces: Spanned<NamespaceScopeSpec>,
    #[serde(default)]
    pub resources: Option<ResourceScopeSpec>,
    #[serde(default)]
    pub operations: Option<Spanned<Vec<GuardedOperation>>>,
    #[serde(default)]
    pub subresources: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub controllers: Vec<ControllerSpec>,
    #[serde(default)]
    pub delegations: Vec<DelegationSpec>,
    #[serde(default)]
    pub break_glass: Option<Spanned<BreakGlassSpec>>,
    /// Kinds nobody deletes, the controllers included, without a deliberate act.
    #[serde(default)]
    pub deletions: Option<Spanned<DeletionsSpec>>,
    /// Suspending the GitOps controller's reconciliation is a break-glass window: it needs an
    /// opener, a reason and an expiry, as `breakGlass` says.
    #[serde(default)]
    pub suspensions: Option<Spanned<SuspensionsSpec>>,
    /// Cluster-scoped kinds the policy guards too, by the same rules as in its namespaces,
    /// with windows on the object.
    #[serde(default)]
    pub cluster_scoped: Option<Spanned<ClusterScopedSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceScopeSpec {
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    #[serde(default)]
    pub exclude: Vec<Spanned<String>>,
    /// Namespaces whose labels match are guarded too (in addition to `include`).
    #[serde(default)]
    pub selector: Option<NamespaceSelectorSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceSelectorSpec {
    pub match_labels: Spanned<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceScopeSpec {
    #[serde(default)]
    pub include: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub exclude: Vec<Spanned<String>>,
}

/// The operations a policy can guard. CONNECT (exec, port-forward, proxy) is not a write to
/// an object, so it is not accepted here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GuardedOperation {
    Create,
    Update,
    Delete,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControllerSpec {
    pub name: Spanned<String>,
    #[serde(default)]
    pub usernames: Vec<Spanned<String>>,
    #[serde(default)]
    pub groups: Vec<Spanned<String>>,
    #[serde(default)]
    pub field_managers: Vec<Spanned<String>>,
    /// Whether a break-glass window holds this controller off (default true): true for GitOps
    /// controllers, whose next apply would revert the emergency change; false for Kubernetes'
    /// own controllers, which never revert it and must keep the namespace working.
    #[serde(default)]
    pub held_by_windows: Option<Spanned<Flag>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DelegationSpec {
    pub name: Spanned<String>,
    #[serde(default)]
    pub usernames: Vec<Spanned<String>>,
    #[serde(default)]
    pub groups: Vec<Spanned<String>>,
    #[serde(default)]
    pub subresources: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub fields: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BreakGlassSpec {
    #[serde(default)]
    pub label: Option<Spanned<String>>,
    #[serde(default)]
    pub reason_annotation: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "unquoted_option_bool")]
    pub require_reason: Option<bool>,
    pub max_duration: Spanned<String>,
    pub openers: Spanned<IdentitySpec>,
    #[serde(default, deserialize_with = "unquoted_option_bool")]
    pub hold_controller: Option<bool>,
    #[serde(default, deserialize_with = "unquoted_option_bool")]
    pub namespace_wide: Option<bool>,
    /// Refuse the controller's writes that would revert a recorded emergency change for this
    /// long after its window ends (default: admit them, and announce the revert).
    #[serde(default)]
    pub refuse_reverts_for: Option<Spanned<String>>,
    /// Keep the new values themselves in the backport record, not only their digests (never
    /// for Secrets).
    #[serde(default, deserialize_with = "unquoted_option_bool")]
    pub record_values: Option<bool>,
    /// A regular expression every reason must match (e.g. a ticket id: `^INC-[0-9]+: `).
    #[serde(default)]
    pub reason_pattern: Option<Spanned<String>>,
}

/// Destructive deletes: which kinds need a deliberate act to delete, and how many deletes a
/// controller may make in a namespace at once.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeletionsSpec {
    /// `group/Kind` globs (default: PersistentVolumeClaims and Namespaces, and
    /// CustomResourceDefinitions when the policy has `clusterScoped`), whatever `resources` says.
    #[serde(default)]
    pub kinds: Option<Vec<Spanned<String>>>,
    /// The annotation (value `"true"`) that allows deleting one object.
    #[serde(default)]
    pub allow_annotation: Option<Spanned<String>>,
    /// Whose deletes follow a deliberate one (default: Kubernetes' namespace controller and
    /// garbage collector, which delete what a deleted namespace or owner held).
    #[serde(default)]
    pub exempt: Option<Spanned<IdentitySpec>>,
    #[serde(default)]
    pub controller_limit: Option<Spanned<DeletionLimitSpec>>,
}

/// Users and groups (globs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentitySpec {
    #[serde(default)]
    pub usernames: Vec<Spanned<String>>,
    #[serde(default)]
    pub groups: Vec<Spanned<String>>,
}

/// At most `deletes` deletes by the controllers in one namespace within `per`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeletionLimitSpec {
    pub deletes: Spanned<u32>,
    pub per: Spanned<String>,
}

/// What counts as suspending the GitOps controller, and where: a write that makes one of these
/// hold, on an object in the policy's namespaces or in `namespaces`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuspensionsSpec {
    /// Globs of the namespaces that hold the GitOps objects (Kustomizations, Applications), in
    /// addition to the policy's own (default: `flux-system` and `argocd`).
    #[serde(default)]
    pub namespaces: Option<Vec<Spanned<String>>>,
    /// Fields that suspend reconciliation (default: Flux's `spec.suspend`, Argo CD's automated
    /// sync and self-heal).
    #[serde(default)]
    pub fields: Option<Vec<SuspensionFieldSpec>>,
    /// Annotations that suspend reconciliation, on any object (default: Flux's
    /// `kustomize.toolkit.fluxcd.io/reconcile: disabled` and `kustomize.toolkit.fluxcd.io/ssa:
    /// Ignore`, in any case; Argo CD's `argocd.argoproj.io/skip-reconcile`, as a boolean).
    #[serde(default)]
    pub annotations: Option<Vec<SuspensionMarkerSpec>>,
    /// Labels that suspend reconciliation, on any object (default: Flux's two, as above: Flux
    /// reads labels and annotations alike).
    #[serde(default)]
    pub labels: Option<Vec<SuspensionMarkerSpec>>,
}

/// A field of some kinds that, when it holds as `suspendedWhen` says, suspends reconciliation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuspensionFieldSpec {
    /// `group/Kind` globs: `kustomize.toolkit.fluxcd.io/Kustomization`, `source.toolkit.fluxcd.io/*`.
    pub kinds: Vec<Spanned<String>>,
    /// The field (`spec.suspend`, `spec.syncPolicy.automated`).
    pub path: Spanned<String>,
    pub suspended_when: SuspendedWhen,
}

/// When a suspension field means "suspended".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SuspendedWhen {
    /// The field is `true` (Flux's `spec.suspend`).
    IsTrue,
    /// The field is `false`; absent does not count (Argo CD 3's `automated.enabled`, which
    /// defaults to true).
    IsFalse,
    /// The field is anything but `true`, or absent (Argo CD's `selfHeal`).
    NotTrue,
    /// The field is absent or null (Argo CD's `automated`).
    Absent,
}

/// A label or annotation that suspends reconciliation when it holds one of these values: `value`
/// or `values`, compared exactly, or as Flux compares them with `ignoreCase`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuspensionMarkerSpec {
    pub key: Spanned<String>,
    #[serde(default)]
    pub value: Option<Spanned<String>>,
    #[serde(default)]
    pub values: Option<Vec<Spanned<String>>>,
    /// Compare values regardless of case, as Go's `strings.EqualFold` (Unicode simple case
    /// folding), which Flux uses. Default false: exactly.
    #[serde(default, deserialize_with = "unquoted_bool")]
    pub ignore_case: bool,
}

/// The cluster-scoped kinds a policy guards (ClusterRoles, CRDs): no namespace selects them, so
/// they are listed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterScopedSpec {
    /// Default: CustomResourceDefinition, ClusterRole and ClusterRoleBinding.
    #[serde(default)]
    pub resources: Option<Vec<Spanned<ClusterScopedResourceSpec>>>,
}

/// One cluster-scoped kind, by API group (`""` or `core` for the core group) and kind.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterScopedResourceSpec {
    #[serde(default)]
    pub group: Option<Spanned<String>>,
    pub kind: Spanned<String>,
}
