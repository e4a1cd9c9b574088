package containerlog

import (
	"path/filepath"
	"strings"
)

// PodFile is what the path of a container log file tells about it.
type PodFile struct {
	Namespace string
	Pod       string
	UID       string // "" when the name does not tell (a /var/log/containers link)
	Container string
	// Restart is the container's restart count (the file is <Restart>.log);
	// "" when the name does not tell.
	Restart string
	// ContainerID is the runtime's id of the container, only in the names
	// of /var/log/containers.
	ContainerID string
}

// ParsePath reads the pod and container from the path of a container log
// file, in either of the kubelet's layouts:
//
//	/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log
//	/var/log/containers/<pod>_<namespace>_<container>-<container id>.log
//
// (the second are links to the first). Only the shape of the last path
// elements counts, not where they are, so a node that keeps its logs
// elsewhere works too; the kubelet's names cannot hold '_' in a namespace,
// a pod or a container name, which is what tells the parts apart.
func ParsePath(path string) (PodFile, bool) {
	var pf PodFile
	name := filepath.Base(path)
	container := filepath.Base(filepath.Dir(path))
	podDir := filepath.Base(filepath.Dir(filepath.Dir(path)))
	if n, ok := strings.CutSuffix(name, ".log"); ok && n != "" && digits(n) {
		parts := strings.Split(podDir, "_")
		if len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "" && container != "" && !strings.Contains(container, "_") {
			pf.Namespace, pf.Pod, pf.UID, pf.Container, pf.Restart = parts[0], parts[1], parts[2], container, n
			return pf, true
		}
	}
	base, ok := strings.CutSuffix(name, ".log")
	if !ok {
		return pf, false
	}
	parts := strings.Split(base, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return pf, false
	}
	i := strings.LastIndexByte(parts[2], '-')
	if i <= 0 || !hex(parts[2][i+1:]) {
		return pf, false
	}
	pf.Pod, pf.Namespace, pf.Container, pf.ContainerID = parts[0], parts[1], parts[2][:i], parts[2][i+1:]
	return pf, true
}

func digits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// hex reports whether s looks like a container id: 64 lowercase hex
// digits (containerd, CRI-O and Docker all use them).
func hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
