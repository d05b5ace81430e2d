# policies/example.yaml, translated by hand into data for driftgate.rego (but for its `gitops` and
# `gitops-argocd` policies, which no load review reaches: see ../differences.json). Defaults that
# driftgate fills in (operations, subresources, delegation subresources, break-glass label and
# reason annotation, requireReason, holdController) are spelled out here, since Rego has no
# policy loader to apply them. Keep the order sorted by name: driftgate decides policies in
# name order, and the first deciding policy names the rule.
package driftgate

gate_policies := [
	{
		"name": "production",
		"mode": "Enforce",
		"namespaces": {"include": ["prod-*", "payments"], "exclude": ["prod-sandbox"]},
		"resources": {
			"include": ["*"],
			"exclude": [
				"core/Event", "events.k8s.io/Event", "coordination.k8s.io/Lease",
				"core/Pod", "apps/ReplicaSet", "apps/ControllerRevision", "batch/Job",
				"core/Endpoints", "discovery.k8s.io/EndpointSlice", "core/PersistentVolumeClaim",
			],
		},
		"operations": ["CREATE", "UPDATE", "DELETE"],
		"subresources": ["", "scale"],
		"controllers": [
			{
				"name": "flux",
				"usernames": [
					"system:serviceaccount:flux-system:kustomize-controller",
					"system:serviceaccount:flux-system:helm-controller",
				],
				"groups": [],
				"fieldManagers": ["kustomize-controller", "helm-controller"],
			},
			{
				"name": "kubernetes",
				"usernames": [
					"system:serviceaccount:kube-system:namespace-controller",
					"system:serviceaccount:kube-system:generic-garbage-collector",
					"system:serviceaccount:kube-system:root-ca-cert-publisher",
					"system:serviceaccount:kube-system:service-account-controller",
					"system:serviceaccount:kube-system:resource-claim-controller",
					"system:kube-controller-manager",
				],
				"groups": [],
				"fieldManagers": [],
				"heldByWindows": false,
			},
		],
		"delegations": [
			{
				"name": "hpa",
				"usernames": ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"],
				"groups": [],
				"subresources": ["scale"],
				"fields": [["spec", "replicas"]],
			},
			{
				"name": "deployment-controller-revision",
				"usernames": ["system:serviceaccount:kube-system:deployment-controller"],
				"groups": [],
				"subresources": [""],
				"fields": [["metadata", "annotations", "deployment.kubernetes.io/revision"]],
			},
			{
				"name": "service-controller-finalizer",
				"usernames": ["system:serviceaccount:kube-system:service-controller"],
				"groups": [],
				"subresources": [""],
				"fields": [["metadata", "finalizers"]],
			},
		],
		"breakGlass": {
			"label": "driftgate.dev/break-glass",
			"reasonAnnotation": "driftgate.dev/break-glass-reason",
			"requireReason": true,
			"maxDuration": "4h",
			"openers": {"groups": ["sre-oncall"], "usernames": []},
			"holdController": true,
			"namespaceWide": true,
		},
	},
	{
		"name": "staging",
		"mode": "Audit",
		"namespaces": {"include": ["staging-*"], "exclude": []},
		"resources": {
			"include": ["*"],
			"exclude": [
				"core/Event", "events.k8s.io/Event", "coordination.k8s.io/Lease",
				"core/Pod", "apps/ReplicaSet", "apps/ControllerRevision", "batch/Job",
				"core/Endpoints", "discovery.k8s.io/EndpointSlice", "core/PersistentVolumeClaim",
			],
		},
		"operations": ["CREATE", "UPDATE", "DELETE"],
		"subresources": ["", "scale"],
		"controllers": [
			{
				"name": "flux",
				"usernames": [
					"system:serviceaccount:flux-system:kustomize-controller",
					"system:serviceaccount:flux-system:helm-controller",
				],
				"groups": [],
				"fieldManagers": ["kustomize-controller", "helm-controller"],
			},
			{
				"name": "kubernetes",
				"usernames": [
					"system:serviceaccount:kube-system:namespace-controller",
					"system:serviceaccount:kube-system:generic-garbage-collector",
					"system:serviceaccount:kube-system:root-ca-cert-publisher",
					"system:serviceaccount:kube-system:service-account-controller",
					"system:serviceaccount:kube-system:resource-claim-controller",
					"system:kube-controller-manager",
				],
				"groups": [],
				"fieldManagers": [],
				"heldByWindows": false,
			},
		],
		"delegations": [
			{
				"name": "hpa",
				"usernames": ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"],
				"groups": [],
				"subresources": ["scale"],
				"fields": [["spec", "replicas"]],
			},
			{
				"name": "deployment-controller-revision",
				"usernames": ["system:serviceaccount:kube-system:deployment-controller"],
				"groups": [],
				"subresources": [""],
				"fields": [["metadata", "annotations", "deployment.kubernetes.io/revision"]],
			},
			{
				"name": "service-controller-finalizer",
				"usernames": ["system:serviceaccount:kube-system:service-controller"],
				"groups": [],
				"subresources": [""],
				"fields": [["metadata", "finalizers"]],
			},
		],
		"breakGlass": {
			"label": "driftgate.dev/break-glass",
			"reasonAnnotation": "driftgate.dev/break-glass-reason",
			"requireReason": true,
			"maxDuration": "8h",
			"openers": {"groups": ["sre-oncall", "staging-deployers"], "usernames": []},
			"holdController": true,
			"namespaceWide": false,
		},
	},
]
