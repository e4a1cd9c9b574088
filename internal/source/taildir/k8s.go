package taildirsource

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/containerlog"
	"github.com/sluicehq/sluice/internal/kubelet"
)

// Headers of container log lines (format cri, docker) and of
// kubernetesMetadata. docs/components.md lists them.
const (
	streamHeader      = "stream"      // stdout or stderr
	timestampHeader   = "timestamp"   // the runtime's time, Unix milliseconds
	timeHeader        = "time"        // the runtime's time as written, RFC 3339 to the nanosecond
	formatErrorHeader = "formatError" // on a line that is not a record of its file's format: why

	k8sNamespace   = "k8s.namespace"
	k8sPod         = "k8s.pod"
	k8sPodUID      = "k8s.pod.uid"
	k8sContainer   = "k8s.container"
	k8sRestart     = "k8s.restart"
	k8sContainerID = "k8s.container.id"
	k8sNode        = "k8s.node"
	k8sLabel       = "k8s.label."
	k8sAnnotation  = "k8s.annotation."
)

// kubeletStartWait is how long the source waits at start for the kubelet's
// first answer, so that the lines already in the files get their labels;
// after that it never waits.
const kubeletStartWait = 2 * time.Second

// kubeletConfig reads the kubernetesMetadata.* keys of kubernetesMetadata =
// kubelet (only then: other modes leave them unread, so they are reported
// as keys the source does not use).
func kubeletConfig(p *config.Props, used bool) kubelet.Config {
	var c kubelet.Config
	if !used {
		return c
	}
	const k = "kubernetesMetadata."
	c.URL = p.String(k+"kubeletURL", kubelet.DefaultURL)
	c.TokenFile = defaultFile(p, k+"tokenFile", kubelet.DefaultTokenFile)
	c.CAFile = defaultFile(p, k+"caFile", kubelet.DefaultCAFile)
	c.InsecureSkipVerify = p.Bool(k+"insecureSkipVerify", false)
	c.Refresh = millis(p, k+"refreshInterval", kubelet.DefaultRefresh.Milliseconds(), 1000)
	c.Timeout = millis(p, k+"timeout", kubelet.DefaultTimeout.Milliseconds(), 1)
	c.MaxPods = p.IntRange(k+"maxPods", kubelet.DefaultMaxPods, 1, 1<<20)
	c.Labels = p.Fields(k + "labels")
	c.Annotations = p.Fields(k + "annotations")
	return c
}

// defaultFile reads a file key whose default is a service account file:
// the default applies only where it exists (a pod), a file named in the
// configuration must exist.
func defaultFile(p *config.Props, key, def string) string {
	if p.Has(key) {
		v := p.String(key, "")
		if v != "" {
			if _, err := os.Stat(v); err != nil {
				p.Errorf(key, "%v", err)
			}
		}
		return v
	}
	if _, err := os.Stat(def); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return def
}

// podMeta is what a file's path (and the kubelet) say about its pod.
type podMeta struct {
	pod     containerlog.PodFile
	ok      bool        // the path is a container log path
	headers [][2]string // from the path
	// From the kubelet, as of its copy's generation gen.
	gen    uint64
	looked bool
	known  bool
	kube   [][2]string
}

// podOf returns tf's pod metadata, read from its path the first time.
// A /var/log/containers link names the pod, namespace, container and
// container id; the file it links to names the pod's uid and the restart.
func (t *tailer) podOf(tf *tailFile) *podMeta {
	if tf.pod != nil {
		return tf.pod
	}
	path := tf.path
	pm := &podMeta{}
	pf, ok := containerlog.ParsePath(path)
	if ok && pf.UID == "" {
		if target, err := filepath.EvalSymlinks(path); err == nil {
			if tpf, ok := containerlog.ParsePath(target); ok && tpf.Namespace == pf.Namespace && tpf.Pod == pf.Pod {
				pf.UID, pf.Restart = tpf.UID, tpf.Restart
			}
		}
	}
	pm.pod, pm.ok = pf, ok
	if ok {
		for _, h := range [][2]string{
			{k8sNamespace, pf.Namespace}, {k8sPod, pf.Pod}, {k8sPodUID, pf.UID}, {k8sContainer, pf.Container},
			{k8sRestart, pf.Restart}, {k8sContainerID, pf.ContainerID},
		} {
			if h[1] != "" {
				pm.headers = append(pm.headers, h)
			}
		}
	}
	tf.pod = pm
	return pm
}

// kubeHeaders brings pm's kubelet metadata up to date with the kubelet
// copy and reports whether the copy knows the pod.
func (t *tailer) kubeHeaders(pm *podMeta) bool {
	if t.kube == nil || !pm.ok {
		return false
	}
	gen := t.kube.Generation()
	if pm.looked && pm.gen == gen {
		return pm.known
	}
	var p *kubelet.Pod
	if pm.pod.UID != "" {
		p = t.kube.ByUID(pm.pod.UID)
	} else {
		p = t.kube.ByName(pm.pod.Namespace, pm.pod.Pod)
	}
	pm.looked, pm.gen, pm.known, pm.kube = true, gen, p != nil, pm.kube[:0]
	if p == nil {
		return false
	}
	if p.Node != "" {
		pm.kube = append(pm.kube, [2]string{k8sNode, p.Node})
	}
	if pm.pod.UID == "" {
		pm.kube = append(pm.kube, [2]string{k8sPodUID, p.UID})
	}
	for k, v := range p.Labels {
		pm.kube = append(pm.kube, [2]string{k8sLabel + k, v})
	}
	for k, v := range p.Annotations {
		pm.kube = append(pm.kube, [2]string{k8sAnnotation + k, v})
	}
	return true
}
