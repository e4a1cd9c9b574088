package pkgtest

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart writes (its API is not in k8s.io/api); decoded strictly too.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one release's manifests, decoded.
type rendered struct {
	kinds     map[string]int
	config    *corev1.ConfigMap
	pod       *corev1.PodTemplateSpec
	workload  any
	services  []*corev1.Service
	pdb       *policyv1.PodDisruptionBudget
	hpa       *autoscalingv2.HorizontalPodAutoscaler
	monitor   *serviceMonitor
	statefulS *appsv1.StatefulSet
	role      *rbacv1.ClusterRole
	binding   *rbacv1.ClusterRoleBinding
}

// decodeStrict decodes one manifest into the Kubernetes API type of its
// kind, refusing any field the type does not have.
func decodeStrict(t *testing.T, doc string, r *rendered) {
	t.Helper()
	var head metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		t.Fatalf("manifest does not parse: %v\n%s", err, doc)
	}
	want := map[string]string{
		"ServiceAccount": "v1", "ConfigMap": "v1", "Service": "v1",
		"DaemonSet": "apps/v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1",
		"PodDisruptionBudget": "policy/v1", "HorizontalPodAutoscaler": "autoscaling/v2",
		"ServiceMonitor": "monitoring.coreos.com/v1",
		"ClusterRole":    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
	}
	if want[head.Kind] != head.APIVersion {
		t.Fatalf("%s %s: not a kind and API version the chart should write (want %q)", head.APIVersion, head.Kind, want[head.Kind])
	}
	var obj any
	switch head.Kind {
	case "ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "ConfigMap":
		r.config = &corev1.ConfigMap{}
		obj = r.config
	case "Service":
		s := &corev1.Service{}
		r.services = append(r.services, s)
		obj = s
	case "DaemonSet":
		d := &appsv1.DaemonSet{}
		obj, r.pod = d, &d.Spec.Template
	case "Deployment":
		d := &appsv1.Deployment{}
		obj, r.pod = d, &d.Spec.Template
	case "StatefulSet":
		d := &appsv1.StatefulSet{}
		obj, r.pod, r.statefulS = d, &d.Spec.Template, d
	case "PodDisruptionBudget":
		r.pdb = &policyv1.PodDisruptionBudget{}
		obj = r.pdb
	case "HorizontalPodAutoscaler":
		r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
		obj = r.hpa
	case "ServiceMonitor":
		r.monitor = &serviceMonitor{}
		obj = r.monitor
	case "ClusterRole":
		r.role = &rbacv1.ClusterRole{}
		obj = r.role
	case "ClusterRoleBinding":
		r.binding = &rbacv1.ClusterRoleBinding{}
		obj = r.binding
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("%s does not decode strictly into its API type: %v\n%s", head.Kind, err, doc)
	}
	if r.pod != nil && r.workload == nil && head.Kind != "ConfigMap" {
		r.workload = obj
	}
	r.kinds[head.Kind]++
}

func render(t *testing.T, helm, chart string, set ...string) *rendered {
	t.Helper()
	var sets []string
	for _, s := range set {
		sets = append(sets, "--set", s)
	}
	args := append([]string{"template", "rel", chart, "--namespace", "logging"}, sets...)
	lint := append([]string{"lint", "--strict", chart}, sets...)
	if out, err := exec.Command(helm, lint...).CombinedOutput(); err != nil {
		t.Fatalf("helm lint %q: %v\n%s", set, err, out)
	}
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		msg := ""
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		t.Fatalf("helm template %q: %v\n%s", set, err, msg)
	}
	r := &rendered{kinds: map[string]int{}}
	for _, doc := range strings.Split(string(out), "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		decodeStrict(t, doc, r)
	}
	return r
}

func container(t *testing.T, r *rendered) corev1.Container {
	t.Helper()
	if r.pod == nil || len(r.pod.Spec.Containers) != 1 {
		t.Fatalf("want one workload with one container; kinds %v", r.kinds)
	}
	return r.pod.Spec.Containers[0]
}

// TestChart: helm lint passes and every manifest of every mode (and the
// optional parts: autoscaling, the ServiceMonitor, a collector address, the
// node agent's pod metadata and RBAC) decodes strictly into the Kubernetes
// API types; each mode is what the chart promises (security, probes, mounts,
// grace, scrape annotations, the node agent's NODE_IP, token and
// ClusterRole), and its default configuration is one sluice validates.
func TestChart(t *testing.T) {
	helm := toolBinary(t, "helm", "helm.sh/helm/v4/cmd/helm")
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "sluice")
	bin := sluiceBinary(t)

	rbac := map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "DaemonSet": 1, "ClusterRole": 1, "ClusterRoleBinding": 1}
	for _, tt := range []struct {
		name      string
		set       []string
		kind      string
		wantKinds map[string]int
	}{
		{"daemonset", []string{"mode=daemonset"}, "DaemonSet", rbac},
		{"daemonset-to-collector-nonroot-monitored", []string{"mode=daemonset", "collector=rel-sluice.logging.svc:4141",
			"daemonset.runAsRoot=false", "serviceMonitor.enabled=true"}, "DaemonSet",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "DaemonSet": 1, "Service": 1, "ServiceMonitor": 1,
				"ClusterRole": 1, "ClusterRoleBinding": 1}},
		{"daemonset-kubelet-insecure-no-proxy", []string{"mode=daemonset", "daemonset.kubelet.insecureSkipVerify=true",
			"rbac.nodesProxy=false"}, "DaemonSet", rbac},
		{"daemonset-kubelet-own-rbac", []string{"mode=daemonset", "rbac.create=false"}, "DaemonSet",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "DaemonSet": 1}},
		{"daemonset-path-metadata", []string{"mode=daemonset", "daemonset.kubernetesMetadata=path"}, "DaemonSet",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "DaemonSet": 1}},
		{"deployment", []string{"mode=deployment"}, "Deployment",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1}},
		{"deployment-autoscaled-monitored", []string{"mode=deployment", "autoscaling.enabled=true", "serviceMonitor.enabled=true"}, "Deployment",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1,
				"HorizontalPodAutoscaler": 1, "ServiceMonitor": 1}},
		{"statefulset", []string{"mode=statefulset", "persistence.storageClassName=fast"}, "StatefulSet",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "StatefulSet": 1, "Service": 2, "PodDisruptionBudget": 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, helm, chart, tt.set...)
			if fmt.Sprint(r.kinds) != fmt.Sprint(tt.wantKinds) {
				t.Errorf("kinds %v, want %v", r.kinds, tt.wantKinds)
			}
			c := container(t, r)
			root := tt.kind == "DaemonSet" && !strings.Contains(tt.name, "nonroot")
			kubelet := tt.kind == "DaemonSet" && !strings.Contains(tt.name, "path-metadata")

			// Non-root (but for the node agent that reads root-owned
			// logs), read-only root, no capabilities, no escalation.
			sc, psc := c.SecurityContext, r.pod.Spec.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || fmt.Sprint(sc.Capabilities.Drop) != "[ALL]" || len(sc.Capabilities.Add) != 0 {
				t.Errorf("container securityContext %+v", sc)
			}
			if psc == nil || psc.RunAsUser == nil || (*psc.RunAsUser == 0) != root ||
				(!root && (psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot)) {
				t.Errorf("pod securityContext %+v (root %v)", psc, root)
			}
			// The grace period is above --shutdown-timeout.
			args := strings.Join(c.Args, " ")
			if g := r.pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 20 || !strings.Contains(args, "--shutdown-timeout 20") {
				t.Errorf("grace %v, args %q", g, args)
			}
			if !strings.Contains(args, "agent -f /etc/sluice/sluice.properties -n sluice --http 0.0.0.0:41414 --poll-interval 10") {
				t.Errorf("args %q", args)
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" ||
				c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
				t.Errorf("probes: readiness %+v liveness %+v", c.ReadinessProbe, c.LivenessProbe)
			}
			ann := r.pod.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "41414" || ann["prometheus.io/path"] != "/metrics/prometheus" {
				t.Errorf("scrape annotations %v", ann)
			}
			// Only the node agent that reads its kubelet's /pods gets the
			// service account's token (and the cluster's CA with it).
			if a := r.pod.Spec.AutomountServiceAccountToken; a == nil || *a != kubelet {
				t.Errorf("automountServiceAccountToken %v, want %v", a, kubelet)
			}
			// The configuration is a directory mount (no subPath), so a
			// ConfigMap update reaches the agent.
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m
			}
			if m := mounts["config"]; m.MountPath != "/etc/sluice" || m.SubPath != "" || !m.ReadOnly {
				t.Errorf("config mount %+v", m)
			}
			if m := mounts["state"]; m.MountPath != "/var/lib/sluice" {
				t.Errorf("state mount %+v", m)
			}
			vols := map[string]corev1.Volume{}
			for _, v := range r.pod.Spec.Volumes {
				vols[v.Name] = v
			}
			switch tt.kind {
			case "DaemonSet":
				if m := mounts["hostlog"]; !m.ReadOnly || m.MountPath != "/var/log" || vols["hostlog"].HostPath == nil {
					t.Errorf("host logs: %+v %+v", m, vols["hostlog"])
				}
				if vols["state"].HostPath == nil || vols["state"].HostPath.Path != "/var/lib/sluice" {
					t.Errorf("positions not on a hostPath: %+v", vols["state"])
				}
				// The kubelet is at https://NODE_IP:10250.
				var nodeIP *corev1.EnvVar
				for i := range c.Env {
					if c.Env[i].Name == "NODE_IP" {
						nodeIP = &c.Env[i]
					}
				}
				if nodeIP == nil || nodeIP.ValueFrom == nil || nodeIP.ValueFrom.FieldRef == nil || nodeIP.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
					t.Errorf("NODE_IP not from the downward API's status.hostIP: %+v", c.Env)
				}
				checkNodeRBAC(t, r, kubelet && !strings.Contains(tt.name, "own-rbac"), !strings.Contains(tt.name, "no-proxy"))
			case "Deployment":
				if vols["state"].EmptyDir == nil {
					t.Errorf("state %+v", vols["state"])
				}
				if r.pdb == nil || r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("pdb %+v", r.pdb)
				}
				ports := map[string]int32{}
				for _, p := range r.services[0].Spec.Ports {
					ports[p.Name] = p.Port
				}
				if ports["avro"] != 4141 || ports["thrift"] != 4142 || ports["http"] != 8080 || ports["status"] != 41414 {
					t.Errorf("service ports %v", ports)
				}
			case "StatefulSet":
				ss := r.statefulS
				if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "state" ||
					ss.Spec.VolumeClaimTemplates[0].Spec.StorageClassName == nil || *ss.Spec.VolumeClaimTemplates[0].Spec.StorageClassName != "fast" {
					t.Errorf("volume claims %+v", ss.Spec.VolumeClaimTemplates)
				}
				if _, ok := vols["state"]; ok {
					t.Error("a pod volume shadows the claim template")
				}
			}
			if r.hpa != nil && (r.hpa.Spec.MaxReplicas != 10 || r.hpa.Spec.ScaleTargetRef.Kind != "Deployment") {
				t.Errorf("hpa %+v", r.hpa.Spec)
			}
			if r.monitor != nil && (len(r.monitor.Spec.Endpoints) != 1 || r.monitor.Spec.Endpoints[0].Path != "/metrics/prometheus") {
				t.Errorf("service monitor %+v", r.monitor.Spec)
			}

			// The default configuration of the mode is valid for sluice.
			props := r.config.Data["sluice.properties"]
			file := filepath.Join(t.TempDir(), "sluice.properties")
			if err := os.WriteFile(file, []byte(props), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "validate", "--strict", "-f", file, "-n", "sluice").CombinedOutput(); err != nil {
				t.Errorf("the chart's configuration: %v\n%s\n%s", err, out, props)
			}
			if strings.Contains(tt.name, "to-collector") && !strings.Contains(props, "sluice.sinks.collector.hostname = rel-sluice.logging.svc") {
				t.Errorf("collector not in the configuration:\n%s", props)
			}
			if tt.kind == "DaemonSet" {
				kv := parseProperties(t, props)
				if m := kv["sluice.sources.pods.kubernetesMetadata"]; (m == "kubelet") != kubelet {
					t.Errorf("kubernetesMetadata = %q (kubelet %v)", m, kubelet)
				}
				insecure := kv["sluice.sources.pods.kubernetesMetadata.insecureSkipVerify"]
				if (insecure == "true") != strings.Contains(tt.name, "insecure") {
					t.Errorf("insecureSkipVerify = %q", insecure)
				}
				if !strings.Contains(tt.name, "to-collector") && kv["sluice.sinks.collector.type"] != "null" {
					t.Errorf("no collector set, but the sink is %q", kv["sluice.sinks.collector.type"])
				}
			}
		})
	}

	// A bad mode or metadata source is refused with the reason.
	out, err := exec.Command(helm, "template", "rel", chart, "--set", "mode=replicaset").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `mode "replicaset": use daemonset, deployment or statefulset`) {
		t.Errorf("mode=replicaset: %v\n%s", err, out)
	}
	out, err = exec.Command(helm, "template", "rel", chart, "--set", "mode=daemonset", "--set", "daemonset.kubernetesMetadata=api").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `daemonset.kubernetesMetadata "api": use kubelet or path`) {
		t.Errorf("daemonset.kubernetesMetadata=api: %v\n%s", err, out)
	}
}

// checkNodeRBAC: the node agent that reads its kubelet's /pods has a
// ClusterRole with get on nodes/pods (and nodes/proxy, which kubelets before
// 1.33 check), bound to the pod's service account; without want, none.
func checkNodeRBAC(t *testing.T, r *rendered, want, nodesProxy bool) {
	t.Helper()
	if !want {
		if r.role != nil || r.binding != nil {
			t.Errorf("RBAC rendered where it is not wanted: %+v %+v", r.role, r.binding)
		}
		return
	}
	if r.role == nil || r.binding == nil {
		t.Fatalf("no ClusterRole or ClusterRoleBinding for the kubelet's /pods: kinds %v", r.kinds)
	}
	var resources []string
	for _, rule := range r.role.Rules {
		if slices.Equal(rule.APIGroups, []string{""}) && slices.Contains(rule.Verbs, "get") {
			resources = append(resources, rule.Resources...)
		}
	}
	slices.Sort(resources)
	wantRes := []string{"nodes/pods"}
	if nodesProxy {
		wantRes = []string{"nodes/pods", "nodes/proxy"}
	}
	if !slices.Equal(resources, wantRes) {
		t.Errorf("ClusterRole grants get on %v, want %v: %+v", resources, wantRes, r.role.Rules)
	}
	b := r.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != r.role.Name || b.RoleRef.APIGroup != "rbac.authorization.k8s.io" {
		t.Errorf("binding's roleRef %+v, ClusterRole %q", b.RoleRef, r.role.Name)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" ||
		b.Subjects[0].Name != r.pod.Spec.ServiceAccountName || b.Subjects[0].Namespace != "logging" {
		t.Errorf("binding's subjects %+v, pod's service account %q in logging", b.Subjects, r.pod.Spec.ServiceAccountName)
	}
}

// parseProperties reads the key = value lines of a configuration (the
// chart's and the example's have no continuation lines, which it refuses).
func parseProperties(t *testing.T, text string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || (strings.HasSuffix(line, "\\") && !strings.HasSuffix(line, "\\\\")) {
			t.Fatalf("line %d: not a one-line key = value: %q", n, line)
		}
		k = strings.TrimSpace(k)
		if _, dup := kv[k]; dup {
			t.Fatalf("line %d: %s set twice", n, k)
		}
		kv[k] = strings.TrimSpace(v)
	}
	return kv
}

// TestChartNodeAgentIsTheExample: the daemonset mode's default
// configuration, with a collector, is examples/kubernetes-node.properties,
// key for key and value for value, once the example's agent name (node) is
// the chart's agentName and its ${env:COLLECTOR:-...} placeholder is the
// host of the value collector (the chart writes it in place; the port is
// the example's 4141). NODE_IP stays a placeholder: the DaemonSet sets it.
func TestChartNodeAgentIsTheExample(t *testing.T) {
	helm := toolBinary(t, "helm", "helm.sh/helm/v4/cmd/helm")
	root := repoRoot(t)
	r := render(t, helm, filepath.Join(root, "deploy", "helm", "sluice"),
		"mode=daemonset", "agentName=edge", "collector=tier.logging.svc:4141")
	got := parseProperties(t, r.config.Data["sluice.properties"])

	example, err := os.ReadFile(filepath.Join(root, "examples", "kubernetes-node.properties"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for k, v := range parseProperties(t, string(example)) {
		name, ok := strings.CutPrefix(k, "node.")
		if !ok {
			t.Fatalf("example: %s: not a key of the agent node", k)
		}
		if v == "${env:COLLECTOR:-sluice-collector}" {
			v = "tier.logging.svc"
		}
		want["edge."+name] = v
	}
	if want["edge.sinks.collector.hostname"] != "tier.logging.svc" || !strings.Contains(want["edge.sources.pods.kubernetesMetadata.kubeletURL"], "${env:NODE_IP") {
		t.Fatalf("the example no longer takes the collector and the kubelet from COLLECTOR and NODE_IP: %v", want)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("chart lacks %s = %s", k, want[k])
		} else if g != want[k] {
			t.Errorf("%s: chart %q, example %q", k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("chart has %s = %s, the example does not", k, got[k])
		}
	}
}
