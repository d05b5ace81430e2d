//! `driftgate suspend KIND/NAME` and `driftgate resume KIND/NAME`: stopping the GitOps
//! controller's reconciliation of one object as a break-glass window. One merge patch sets the
//! suspension (Flux's `spec.suspend`, or an annotation for kinds without one) together with the
//! window's label (the expiry) and reason, so driftgate sees all three at once; resuming
//! reads the object and undoes every suspension found on it, with the label and reason.

use std::io::Write;

use clap::Args;
use jiff::Timestamp;
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use crate::cli::break_glass::{
    BreakGlassKeys, Target, expiry_after, local, locate, parse_target, patch_reading_warnings,
};
use crate::cli::cluster::{ConnectionArgs, connect};
use crate::cli::error::CliError;
use driftgate_core::policy::suspensions::{
    ARGO_SKIP_RECONCILE_ANNOTATION, FLUX_RECONCILE_ANNOTATION, FLUX_SUSPENDABLE_KINDS,
    SuspensionRules,
};
use driftgate_core::suspensions::{Listed, undo_suspensions};
use driftgate_core::timefmt::{format_expiry, human_utc};

#[derive(Debug, Args)]
pub struct SuspendArgs {
    #[command(flatten)]
    pub target: SuspensionTarget,
    /// How long reconciliation stays suspended (at most the policy's maxDuration): 30m, 1h.
    #[arg(long = "for", value_name = "DURATION")]
    pub duration: String,
    /// Why: the incident and what the suspension is for.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct SuspensionTarget {
    /// KIND/NAME of the GitOps object (`kustomization/apps`, `helmrelease/podinfo`,
    /// `application/shop`) or of any object Flux applies (`deployment/api`).
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// The object's namespace; default: the context's.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub keys: BreakGlassKeys,
}

/// How an object of one kind is suspended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// Flux's `spec.suspend` (what `flux suspend` sets).
    FluxSuspend,
    /// Argo CD's `argocd.argoproj.io/skip-reconcile: "true"`, on an Application.
    ArgoSkipReconcile,
    /// Flux's `kustomize.toolkit.fluxcd.io/reconcile: disabled`, on any object it applies.
    FluxReconcileDisabled,
}

/// The mechanism for objects of `resource` (pure).
pub fn mechanism(resource: &ApiResource) -> Mechanism {
    let kind = format!("{}/{}", resource.group, resource.kind);
    if FLUX_SUSPENDABLE_KINDS.contains(&kind.as_str()) {
        Mechanism::FluxSuspend
    } else if kind == "argoproj.io/Application" {
        Mechanism::ArgoSkipReconcile
    } else {
        Mechanism::FluxReconcileDisabled
    }
}

/// The merge patch that suspends until `label_value`, for `reason` (pure).
pub fn suspend_patch(
    mechanism: Mechanism,
    keys: &BreakGlassKeys,
    label_value: &str,
    reason: &str,
) -> Value {
    let mut patch = json!({"metadata": {
        "labels": {keys.label.as_str(): label_value},
        "annotations": {keys.reason_annotation.as_str(): reason},
    }});
    match mechanism {
        Mechanism::FluxSuspend => patch["spec"] = json!({"suspend": true}),
        Mechanism::ArgoSkipReconcile => {
            let (key, value) = ARGO_SKIP_RECONCILE_ANNOTATION;
            patch["metadata"]["annotations"][key] = json!(value);
        }
        Mechanism::FluxReconcileDisabled => {
            let (key, value) = FLUX_RECONCILE_ANNOTATION;
            patch["metadata"]["annotations"][key] = json!(value);
        }
    }
    patch
}

/// The merge patch that resumes `object`, of `resource`: every suspension the documented
/// definitions find on it undone (Flux's `spec.suspend` back to false, as `flux resume` leaves
/// it; Argo CD's `enabled` and `selfHeal` back to true; Flux's and Argo CD's labels and
/// annotations removed), and the window's label and reason removed; or, in words, what it
/// cannot undo (Argo CD's automated sync removed) (pure).
pub fn resume_patch(
    resource: &ApiResource,
    object: &DynamicObject,
    keys: &BreakGlassKeys,
) -> Result<Value, Vec<String>> {
    let item = Listed {
        group: &resource.group,
        kind: &resource.kind,
        object,
    };
    let mut patch = undo_suspensions(&SuspensionRules::defaults(), &item)?;
    patch["metadata"]["labels"][keys.label.as_str()] = Value::Null;
    patch["metadata"]["annotations"][keys.reason_annotation.as_str()] = Value::Null;
    Ok(patch)
}

/// `KIND/NAME`, required here (pure).
pub fn parse_suspension_target(spec: &str) -> Result<Target, CliError> {
    match parse_target(spec) {
        Ok(target @ Target::Object { .. }) => Ok(target),
        _ => Err(CliError::SuspensionTarget {
            target: spec.to_owned(),
        }),
    }
}

/// What `suspend` prints once suspended (pure): until when, driftgate's words, how to resume.
pub fn suspended_message(
    program: &str,
    words: &str,
    target: &str,
    namespace: &str,
    expiry: (String, String),
    warnings: &[String],
) -> String {
    let (local, utc) = expiry;
    let mut text = super::break_glass::headline_and_warnings(
        format!("reconciliation of {words} suspended until {local} ({utc})."),
        warnings,
        &format!(
            "check that a policy's suspensions cover namespace {namespace}, or this suspension is not recorded"
        ),
    );
    text.push_str(&format!(
        "Nothing resumes it at expiry (unless driftgate runs with --resume-expired-suspensions): it is then reported as a forgotten suspension. Resume it with `{program} resume {target} -n {namespace}`; run this command again to extend it.\n"
    ));
    text
}

pub async fn suspend(
    args: &SuspendArgs,
    program: &str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let expiry = expiry_after(&args.duration, Timestamp::now())?;
    if args.reason.trim().is_empty()
        || driftgate_core::decision::is_placeholder_reason(&args.reason)
    {
        return Err(CliError::Reason);
    }
    let on = &args.target;
    let target = parse_suspension_target(&on.target)?;
    let cluster = connect(&on.connection).await?;
    let namespace = cluster.namespace_or(on.namespace.as_ref());
    let located = locate(&cluster, &target, &namespace).await?;
    let patch = suspend_patch(
        mechanism(&located.served),
        &on.keys,
        &format_expiry(expiry),
        &args.reason,
    );
    let warnings = patch_reading_warnings(&cluster, &located, &patch)
        .await
        .map_err(|e| cluster.error(located.attempt("suspending reconciliation"), e))?;
    let message = suspended_message(
        program,
        &located.words,
        &on.target,
        &namespace,
        (local(expiry), human_utc(expiry)),
        &warnings,
    );
    let _ = write!(out, "{message}");
    Ok(())
}

pub async fn resume(args: &SuspensionTarget, out: &mut impl Write) -> Result<(), CliError> {
    let target = parse_suspension_target(&args.target)?;
    let cluster = connect(&args.connection).await?;
    let namespace = cluster.namespace_or(args.namespace.as_ref());
    let located = locate(&cluster, &target, &namespace).await?;
    let object = located
        .read(&cluster, "reading the suspension to resume")
        .await?;
    let patch = resume_patch(&located.served, &object, &args.keys).map_err(|cannot| {
        CliError::CannotResume {
            words: located.words.clone(),
            cannot: cannot.join(", "),
            label: args.keys.label.clone(),
            reason_annotation: args.keys.reason_annotation.clone(),
        }
    })?;
    patch_reading_warnings(&cluster, &located, &patch)
        .await
        .map_err(|e| cluster.error(located.attempt("resuming reconciliation"), e))?;
    let _ = writeln!(
        out,
        "reconciliation of {} resumed; the GitOps controller reconciles it again.",
        located.words
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;

    fn keys() -> BreakGlassKeys {
        BreakGlassKeys {
            label: driftgate_core::policy::DEFAULT_BREAK_GLASS_LABEL.into(),
            reason_annotation: driftgate_core::policy::DEFAULT_REASON_ANNOTATION.into(),
        }
    }

    fn resource(group: &str, kind: &str) -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind))
    }

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn one_patch_sets_the_suspension_the_expiry_and_the_reason() {
        let flux = mechanism(&resource("kustomize.toolkit.fluxcd.io", "Kustomization"));
        assert_eq!(flux, Mechanism::FluxSuspend);
        assert_eq!(
            suspend_patch(flux, &keys(), "20261130T0930Z", "INC-1: hotfix"),
            json!({"spec": {"suspend": true}, "metadata": {
                "labels": {"driftgate.dev/break-glass": "20261130T0930Z"},
                "annotations": {"driftgate.dev/break-glass-reason": "INC-1: hotfix"}}})
        );
        let argo = mechanism(&resource("argoproj.io", "Application"));
        assert_eq!(
            suspend_patch(argo, &keys(), "x", "y")["metadata"]["annotations"]["argocd.argoproj.io/skip-reconcile"],
            "true"
        );
        let deployment = mechanism(&resource("apps", "Deployment"));
        assert_eq!(
            suspend_patch(deployment, &keys(), "x", "y")["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"],
            "disabled"
        );
    }

    #[test]
    fn resume_undoes_every_suspension_it_finds_with_the_expiry_and_the_reason() {
        let kustomization = object(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"suspend": true}}));
        let flux = resource("kustomize.toolkit.fluxcd.io", "Kustomization");
        assert_eq!(
            resume_patch(&flux, &kustomization, &keys()),
            Ok(json!({"spec": {"suspend": false}, "metadata": {
                "labels": {"driftgate.dev/break-glass": null},
                "annotations": {"driftgate.dev/break-glass-reason": null}}}))
        );
        // Each of Flux's forms on an object it applies, whatever its case; `ssa: Merge` is no
        // suspension and stays.
        let deployment = object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": "prod",
                "labels": {"kustomize.toolkit.fluxcd.io/ssa": "ignore", "app": "api"},
                "annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "Disabled",
                    "kustomize.toolkit.fluxcd.io/ssa": "Merge"}}}));
        assert_eq!(
            resume_patch(&resource("apps", "Deployment"), &deployment, &keys()),
            Ok(json!({"metadata": {
                "labels": {"driftgate.dev/break-glass": null, "kustomize.toolkit.fluxcd.io/ssa": null},
                "annotations": {"driftgate.dev/break-glass-reason": null,
                    "kustomize.toolkit.fluxcd.io/reconcile": null}}}))
        );
        // Argo CD 3's automated sync turned off comes back on; removed, it cannot be restored.
        let argo = resource("argoproj.io", "Application");
        let disabled = object(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd",
                "annotations": {"argocd.argoproj.io/skip-reconcile": "1"}},
            "spec": {"syncPolicy": {"automated": {"enabled": false, "selfHeal": true}}}}));
        assert_eq!(
            resume_patch(&argo, &disabled, &keys()),
            Ok(
                json!({"spec": {"syncPolicy": {"automated": {"enabled": true}}}, "metadata": {
                "labels": {"driftgate.dev/break-glass": null},
                "annotations": {"driftgate.dev/break-glass-reason": null,
                    "argocd.argoproj.io/skip-reconcile": null}}})
            )
        );
        let removed = object(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd"},
            "spec": {"syncPolicy": {}}}));
        let cannot = resume_patch(&argo, &removed, &keys()).unwrap_err();
        assert_eq!(
            cannot[0],
            "spec.syncPolicy.automated (removed: what it held is unknown)"
        );
    }

    #[test]
    fn the_suspended_message_says_until_when_and_how_to_resume() {
        let text = suspended_message(
            "driftgate",
            "kustomization/apps in namespace flux-system",
            "kustomization/apps",
            "flux-system",
            ("2026-11-30 10:30 CET".into(), "2026-11-30 09:30 UTC".into()),
            &[],
        );
        assert!(text.starts_with("reconciliation of kustomization/apps in namespace flux-system suspended until 2026-11-30 10:30 CET (2026-11-30 09:30 UTC).\n"), "{text}");
        assert!(text.contains("check that a policy's suspensions cover namespace flux-system"));
        assert!(text.contains("`driftgate resume kustomization/apps -n flux-system`"));
        assert!(parse_suspension_target("apps").is_err());
    }
}
