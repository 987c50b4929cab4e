// Package helm tests the Helm chart (deploy/helm/prestroid) and the plain
// Kubernetes example (deploy/kubernetes): `helm lint` and `helm template`
// with the real helm (built from its Go module by scripts/install-helm.sh),
// every rendered document strictly decoded into its Kubernetes type
// (k8s.io/api, and the Prometheus Operator's for the ServiceMonitor:
// unknown or misspelt fields fail), the objects checked against each other
// (selectors, port names, probes, the Secrets and ConfigMaps that env and
// volumes name), and the pod's configuration (the ConfigMap's file, the
// Secret's environment variables and TLS files, as the Deployment mounts
// them) accepted by `prestroid serve --check-config` of the real binary.
//
// A module of its own, so that the Kubernetes API types stay out of the
// proxy's go.mod; `make test` runs it (the Makefile's helm-test).
//
// Environment: PRESTROID_HELM (skips without it), PRESTROID_BIN (the
// --check-config part skips without it), PRESTROID_ORT_LIB (passed on, as
// the image sets it).
package helm

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"
)

const (
	routeSecret = "a-route-secret-shared-by-every-replica-0123456789"
	adminToken  = "an-admin-token-for-the-scraper"
	namespace   = "trino"
)

// objects are the decoded documents of one rendering, by kind and name.
type objects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	monitors    map[string]*monitoringv1.ServiceMonitor
	pdbs        map[string]*policyv1.PodDisruptionBudget
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// decode strictly decodes a multi-document YAML stream (helm template's
// output, or a manifest file).
func decode(t *testing.T, stream []byte) objects {
	t.Helper()
	o := objects{map[string]*appsv1.Deployment{}, map[string]*corev1.Service{}, map[string]*corev1.ConfigMap{},
		map[string]*corev1.Secret{}, map[string]*monitoringv1.ServiceMonitor{}, map[string]*policyv1.PodDisruptionBudget{}}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	n := 0
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(stream), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		obj, gvk, err := strict.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("document does not decode strictly as a Kubernetes object: %v\n%s", err, doc)
		}
		n++
		switch v := obj.(type) {
		case *appsv1.Deployment:
			o.deployments[v.Name] = v
		case *corev1.Service:
			o.services[v.Name] = v
		case *corev1.ConfigMap:
			o.configMaps[v.Name] = v
		case *corev1.Secret:
			o.secrets[v.Name] = v
		case *monitoringv1.ServiceMonitor:
			o.monitors[v.Name] = v
		case *policyv1.PodDisruptionBudget:
			o.pdbs[v.Name] = v
		default:
			t.Fatalf("unexpected kind %s", gvk)
		}
	}
	if n == 0 {
		t.Fatal("no documents")
	}
	return o
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// check verifies the objects against each other: what a cluster would
// only find out when pods fail to start or Services have no endpoints.
func (o objects) check(t *testing.T) {
	t.Helper()
	if len(o.deployments) == 0 {
		t.Fatal("no Deployment")
	}
	for _, d := range o.deployments {
		sel := d.Spec.Selector.MatchLabels
		if len(sel) == 0 || !subset(sel, d.Spec.Template.Labels) {
			t.Errorf("Deployment %s: selector %v does not match its pod labels %v", d.Name, sel, d.Spec.Template.Labels)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				if _, ok := o.configMaps[v.ConfigMap.Name]; !ok {
					t.Errorf("Deployment %s: volume %s names ConfigMap %s, not rendered", d.Name, v.Name, v.ConfigMap.Name)
				}
			}
			if v.Secret != nil {
				if _, ok := o.secrets[v.Secret.SecretName]; !ok {
					t.Errorf("Deployment %s: volume %s names Secret %s, not rendered", d.Name, v.Name, v.Secret.SecretName)
				}
			}
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			ports := map[string]bool{}
			for _, p := range c.Ports {
				ports[p.Name] = true
			}
			for _, m := range c.VolumeMounts {
				if !hasVolume(d, m.Name) {
					t.Errorf("Deployment %s: mount %s of no volume", d.Name, m.Name)
				}
			}
			for _, e := range c.Env {
				if r := secretRef(e); r != nil {
					s, ok := o.secrets[r.Name]
					if !ok {
						t.Errorf("Deployment %s: env %s names Secret %s, not rendered", d.Name, e.Name, r.Name)
					} else if _, has := secretData(s)[r.Key]; !has && (r.Optional == nil || !*r.Optional) {
						t.Errorf("Deployment %s: env %s needs key %s of Secret %s, absent", d.Name, e.Name, r.Key, r.Name)
					}
				}
			}
			for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if p == nil {
					t.Errorf("Deployment %s/%s: no %s probe", d.Name, c.Name, what)
					continue
				}
				if p.HTTPGet != nil && !ports[p.HTTPGet.Port.String()] {
					t.Errorf("Deployment %s/%s: %s probe on port %s, not a container port", d.Name, c.Name, what, p.HTTPGet.Port.String())
				}
			}
		}
	}
	for _, s := range o.services {
		var pod *appsv1.Deployment
		for _, d := range o.deployments {
			if subset(s.Spec.Selector, d.Spec.Template.Labels) {
				if pod != nil {
					t.Errorf("Service %s selects the pods of %s and %s", s.Name, pod.Name, d.Name)
				}
				pod = d
			}
		}
		if pod == nil {
			t.Errorf("Service %s: selector %v matches no Deployment's pods", s.Name, s.Spec.Selector)
			continue
		}
		for _, p := range s.Spec.Ports {
			if !containerPort(pod, p.TargetPort.String()) {
				t.Errorf("Service %s: targetPort %s is no container port of %s", s.Name, p.TargetPort.String(), pod.Name)
			}
		}
	}
	for _, m := range o.monitors {
		for _, e := range m.Spec.Endpoints {
			found := false
			for _, s := range o.services {
				if subset(m.Spec.Selector.MatchLabels, s.Labels) {
					for _, p := range s.Spec.Ports {
						found = found || p.Name == e.Port
					}
				}
			}
			if !found {
				t.Errorf("ServiceMonitor %s: endpoint port %q on no selected Service", m.Name, e.Port)
			}
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func hasVolume(d *appsv1.Deployment, name string) bool {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

func containerPort(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name || fmt.Sprint(p.ContainerPort) == name {
				return true
			}
		}
	}
	return false
}

// secretData is a Secret's data as the API server stores it (stringData
// merged into data).
func secretData(s *corev1.Secret) map[string][]byte {
	d := map[string][]byte{}
	for k, v := range s.Data {
		d[k] = v
	}
	for k, v := range s.StringData {
		d[k] = []byte(v)
	}
	return d
}

func secretRef(e corev1.EnvVar) *corev1.SecretKeySelector {
	if e.ValueFrom == nil {
		return nil
	}
	return e.ValueFrom.SecretKeyRef
}

// proxyContainer is the Deployment's prestroid container.
func (o objects) proxyContainer(t *testing.T) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	for _, d := range o.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "prestroid" {
				return d, c
			}
		}
	}
	t.Fatal("no prestroid container")
	return nil, corev1.Container{}
}

// checkConfig runs the real binary's serve --check-config on the pod's
// configuration: each volume the container mounts is written under a
// temporary root (the ConfigMap's and Secrets' keys as files), the mount
// paths in the command and in the config file are moved under it, and the
// container's environment is resolved from the rendered Secrets. It
// returns the report.
func (o objects) checkConfig(t *testing.T, bin string) string {
	t.Helper()
	d, c := o.proxyContainer(t)
	root := t.TempDir()
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var pairs []string
	for _, m := range mounts {
		pairs = append(pairs, m, root+m) // longest first: NewReplacer tries them in order
	}
	relocate := strings.NewReplacer(pairs...).Replace
	for _, m := range c.VolumeMounts {
		var files map[string][]byte
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				files = map[string][]byte{}
				for k, val := range o.configMaps[v.ConfigMap.Name].Data {
					files[k] = []byte(relocate(val))
				}
			case v.Secret != nil:
				files = secretData(o.secrets[v.Secret.SecretName])
			}
		}
		dst := root + m.MountPath
		if m.SubPath != "" {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if b, ok := files[m.SubPath]; ok {
				os.WriteFile(dst, b, 0o600)
			}
			continue
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, b := range files {
			os.WriteFile(filepath.Join(dst, k), b, 0o600)
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if lib := os.Getenv("PRESTROID_ORT_LIB"); lib != "" {
		env = append(env, "PRESTROID_ORT_LIB="+lib) // the image sets it
	}
	for _, e := range c.Env {
		if r := secretRef(e); r != nil {
			if b, ok := secretData(o.secrets[r.Name])[r.Key]; ok {
				env = append(env, e.Name+"="+string(b))
			}
			continue
		}
		env = append(env, e.Name+"="+e.Value)
	}
	if len(c.Command) < 2 || !strings.HasSuffix(c.Command[0], "/prestroid") || c.Command[1] != "serve" {
		t.Fatalf("container command %q is not prestroid serve", c.Command)
	}
	args := append([]string{}, c.Command[1:]...)
	args = append(args, c.Args...)
	for i := range args {
		args[i] = relocate(args[i])
	}
	cmd := exec.Command(bin, append(args, "--check-config")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "config OK") {
		t.Fatalf("prestroid %s --check-config: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy/helm/prestroid/Chart.yaml")); err != nil {
		t.Fatal(err)
	}
	return root
}

func helmBin(t *testing.T) string {
	t.Helper()
	h := os.Getenv("PRESTROID_HELM")
	if h == "" {
		t.Skip("PRESTROID_HELM not set: scripts/install-helm.sh builds helm from its Go module")
	}
	return h
}

func runHelm(t *testing.T, helm string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm, args...)
	// No repository cache or config from the user's home.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// selfSigned returns a PEM certificate and key for the Service's name.
func selfSigned(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rel-prestroid." + namespace + ".svc"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(90 * 24 * time.Hour),
		DNSNames: []string{"rel-prestroid." + namespace + ".svc"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
}

// writeValues writes a values file (marshalled from v) and returns its path.
func writeValues(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// configOf is the rendered config file, parsed.
func configOf(t *testing.T, o objects, name string) map[string]any {
	t.Helper()
	cm, ok := o.configMaps[name]
	if !ok {
		t.Fatalf("no ConfigMap %s", name)
	}
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	return cfg
}

func TestHelmChart(t *testing.T) {
	t.Parallel()
	helm := helmBin(t)
	bin := os.Getenv("PRESTROID_BIN")
	chart := filepath.Join(repoRoot(t), "deploy/helm/prestroid")
	cert, key := selfSigned(t)
	full := writeValues(t, map[string]any{
		"replicaCount": 3, "routeSecret": routeSecret, "adminToken": adminToken,
		"redis":               map[string]any{"enabled": true},
		"tls":                 map[string]any{"enabled": true, "cert": cert, "key": key},
		"metrics":             map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}}},
		"podDisruptionBudget": map[string]any{"enabled": true},
		"config": map[string]any{
			"public_url": "https://trino.example.com",
			"clusters": []any{
				map[string]any{"name": "small", "url": "http://trino-small:8080", "class": "small"},
				map[string]any{"name": "large", "url": "http://trino-large:8080", "class": "large"},
			},
			"routing":   map[string]any{"classes": []any{map[string]any{"name": "small", "max_cpu_seconds": 30}, map[string]any{"name": "large"}}},
			"admission": map[string]any{"max_queries": 40, "user_max_queries": 5},
		},
	})
	external := writeValues(t, map[string]any{"replicaCount": 2, "routeSecret": routeSecret,
		"redis": map[string]any{"url": "redis://:hunter2@redis.shared:6379/3"}})

	t.Run("helm lint", func(t *testing.T) {
		for _, v := range [][]string{nil, {"-f", full}, {"-f", external}} {
			out, err := runHelm(t, helm, append([]string{"lint", "--strict", chart}, v...)...)
			if err != nil || !strings.Contains(string(out), "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("helm lint %v: %v\n%s", v, err, out)
			}
		}
	})

	render := func(t *testing.T, values ...string) objects {
		t.Helper()
		args := []string{"template", "rel", chart, "--namespace", namespace}
		for _, v := range values {
			args = append(args, "-f", v)
		}
		out, err := runHelm(t, helm, args...)
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, out)
		o.check(t)
		return o
	}

	t.Run("default values", func(t *testing.T) {
		o := render(t)
		d, c := o.proxyContainer(t)
		if *d.Spec.Replicas != 1 || len(o.secrets) != 0 || len(o.monitors) != 0 || len(o.pdbs) != 0 {
			t.Errorf("replicas %d, %d Secrets, %d ServiceMonitors, %d PDBs; want 1, 0, 0, 0", *d.Spec.Replicas, len(o.secrets), len(o.monitors), len(o.pdbs))
		}
		if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Port.String() != "admin" {
			t.Errorf("probes: readiness %+v, liveness %+v", c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet)
		}
		if a := d.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "8081" || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("scrape annotations %v", a)
		}
		cfg := configOf(t, o, "rel-prestroid")
		if cfg["listen"] != "0.0.0.0:8080" || cfg["admin_listen"] != "0.0.0.0:8081" {
			t.Errorf("listen %v, admin_listen %v", cfg["listen"], cfg["admin_listen"])
		}
		if hosts := fmt.Sprint(cfg["allowed_hosts"]); !strings.Contains(hosts, "rel-prestroid."+namespace+".svc:8080") {
			t.Errorf("allowed_hosts %s lacks the Service's name", hosts)
		}
		if bin == "" {
			t.Skip("PRESTROID_BIN not set: the rendered config is not checked")
		}
		out := o.checkConfig(t, bin)
		if !strings.Contains(out, "warn  route_secret: none") {
			t.Errorf("one replica without a route secret is not warned about:\n%s", out)
		}
	})

	t.Run("replicas, Redis, TLS, ServiceMonitor", func(t *testing.T) {
		o := render(t, full)
		d, c := o.proxyContainer(t)
		if *d.Spec.Replicas != 3 {
			t.Errorf("replicas %d", *d.Spec.Replicas)
		}
		if _, ok := d.Spec.Template.Annotations["prometheus.io/scrape"]; ok {
			t.Errorf("scrape annotations with an admin token (annotation discovery sends none)")
		}
		redis, ok := o.deployments["rel-prestroid-redis"]
		if !ok || o.services["rel-prestroid-redis"] == nil {
			t.Fatalf("no Redis Deployment and Service")
		}
		if redis.Spec.Template.Spec.Containers[0].Image != "redis:7.0.15" {
			t.Errorf("redis image %s", redis.Spec.Template.Spec.Containers[0].Image)
		}
		cfg := configOf(t, o, "rel-prestroid")
		adm, _ := cfg["admission"].(map[string]any)
		if adm["redis"] != "redis://rel-prestroid-redis:6379/0" || fmt.Sprint(adm["replicas"]) != "3" || fmt.Sprint(adm["max_queries"]) != "40" {
			t.Errorf("admission %v", adm)
		}
		if tls, _ := cfg["tls"].(map[string]any); tls["cert_file"] != "/etc/prestroid/tls/tls.crt" {
			t.Errorf("tls %v", cfg["tls"])
		}
		if _, ok := cfg["allowed_hosts"]; ok {
			t.Errorf("allowed_hosts set beside public_url")
		}
		if s := o.secrets["rel-prestroid-tls"]; s == nil || s.Type != corev1.SecretTypeTLS || string(s.Data["tls.crt"]) != cert {
			t.Errorf("TLS Secret %+v", s)
		}
		sec := o.secrets["rel-prestroid"]
		if sec == nil || string(sec.Data["route-secret"]) != routeSecret || string(sec.Data["admin-token"]) != adminToken {
			t.Fatalf("Secret %+v", sec)
		}
		if strings.Contains(o.configMaps["rel-prestroid"].Data["config.yaml"], routeSecret) {
			t.Errorf("the route secret is in the ConfigMap")
		}
		envs := map[string]string{}
		for _, e := range c.Env {
			if r := secretRef(e); r != nil {
				envs[e.Name] = r.Key
			}
		}
		if envs["PRESTROID_ROUTE_SECRET"] != "route-secret" || envs["PRESTROID_ADMIN_TOKEN"] != "admin-token" {
			t.Errorf("env from the Secret: %v", envs)
		}
		m := o.monitors["rel-prestroid"]
		if m == nil || len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Authorization == nil ||
			m.Spec.Endpoints[0].Authorization.Credentials.Key != "admin-token" || m.Labels["release"] != "kube-prometheus" {
			t.Errorf("ServiceMonitor %+v", m)
		}
		if p := o.pdbs["rel-prestroid"]; p == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("PodDisruptionBudget %+v", p)
		}
		if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable.IntValue() != 0 {
			t.Errorf("rolling update %+v: a new pod must be ready before an old one goes", s)
		}
		if bin == "" {
			t.Skip("PRESTROID_BIN not set: the rendered config is not checked")
		}
		out := o.checkConfig(t, bin)
		for _, w := range []string{"ok    route_secret: set", "ok    tls: ", "CN=rel-prestroid.trino.svc", "ok    admission.redis: set",
			"ok    admin_listen: 0.0.0.0:8081 (admin token: true)"} {
			if !strings.Contains(out, w) {
				t.Errorf("check-config report lacks %q:\n%s", w, out)
			}
		}
	})

	t.Run("an external Redis from the Secret", func(t *testing.T) {
		o := render(t, external)
		if _, ok := o.deployments["rel-prestroid-redis"]; ok {
			t.Errorf("a Redis Deployment with redis.url")
		}
		if strings.Contains(o.configMaps["rel-prestroid"].Data["config.yaml"], "hunter2") {
			t.Errorf("the Redis URL (with its password) is in the ConfigMap")
		}
		if bin == "" {
			t.Skip("PRESTROID_BIN not set: the rendered config is not checked")
		}
		if out := o.checkConfig(t, bin); !strings.Contains(out, "ok    admission.redis: set") || strings.Contains(out, "hunter2") {
			t.Errorf("check-config report:\n%s", out)
		}
	})

	t.Run("values the chart refuses", func(t *testing.T) {
		for _, c := range []struct {
			set  []string
			want string
		}{
			{[]string{"replicaCount=2"}, "routeSecret (at least 32 bytes) or existingSecret is required"},
			{[]string{"redis.enabled=true"}, "routeSecret (at least 32 bytes) or existingSecret is required"},
			{[]string{"routeSecret=short"}, "routeSecret must be at least 32 bytes"},
			{[]string{"tls.enabled=true"}, "tls.enabled needs tls.cert and tls.key"},
			{[]string{"routeSecret=" + routeSecret, "redis.enabled=true", "redis.url=redis://x:6379"}, "not both"},
		} {
			args := []string{"template", "rel", chart}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			if _, err := runHelm(t, helm, args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("--set %v: %v; want an error saying %q", c.set, err, c.want)
			}
		}
	})
}

// TestKubernetesExample checks deploy/kubernetes/prestroid.yaml the same
// way (no helm needed).
func TestKubernetesExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/kubernetes/prestroid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, b)
	o.check(t)
	d, c := o.proxyContainer(t)
	if *d.Spec.Replicas < 2 || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("replicas %d, probes %+v %+v", *d.Spec.Replicas, c.ReadinessProbe, c.LivenessProbe)
	}
	bin := os.Getenv("PRESTROID_BIN")
	if bin == "" {
		t.Skip("PRESTROID_BIN not set: the example's config is not checked")
	}
	if out := o.checkConfig(t, bin); !strings.Contains(out, "ok    route_secret: set") {
		t.Errorf("check-config report:\n%s", out)
	}
}
