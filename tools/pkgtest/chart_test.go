package pkgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
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
		if ee, ok := err.(*exec.ExitError); ok {
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
// optional parts: autoscaling, the ServiceMonitor, a collector address)
// decodes strictly into the Kubernetes API types; each mode is what the
// chart promises (security, probes, mounts, grace, scrape annotations), and
// its default configuration is one sluice validates.
func TestChart(t *testing.T) {
	helm := toolBinary(t, "helm", "helm.sh/helm/v4/cmd/helm")
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "sluice")
	bin := sluiceBinary(t)

	for _, tt := range []struct {
		name      string
		set       []string
		kind      string
		wantKinds map[string]int
	}{
		{"daemonset", []string{"mode=daemonset"}, "DaemonSet",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "DaemonSet": 1}},
		{"daemonset-to-collector-nonroot-monitored", []string{"mode=daemonset", "collector=rel-sluice.logging.svc:4141",
			"daemonset.runAsRoot=false", "serviceMonitor.enabled=true"}, "DaemonSet",
			map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "DaemonSet": 1, "Service": 1, "ServiceMonitor": 1}},
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
			root := tt.name == "daemonset"

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
			if r.pod.Spec.AutomountServiceAccountToken == nil || *r.pod.Spec.AutomountServiceAccountToken {
				t.Error("the service account token is mounted; sluice does not use the API")
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
			if strings.Contains(tt.name, "to-collector") && !strings.Contains(props, "sluice.sinks.out.hostname = rel-sluice.logging.svc") {
				t.Errorf("collector not in the configuration:\n%s", props)
			}
		})
	}

	// A bad mode is refused with the reason.
	out, err := exec.Command(helm, "template", "rel", chart, "--set", "mode=replicaset").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `mode "replicaset": use daemonset, deployment or statefulset`) {
		t.Errorf("mode=replicaset: %v\n%s", err, out)
	}
}
