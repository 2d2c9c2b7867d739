package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxReviewBytes bounds an AdmissionReview request body. The API server
// refuses objects over 3 MiB (etcd's request limit is 1.5 MiB); a review
// carries the object once (twice for an update), plus its metadata.
const MaxReviewBytes = 8 << 20

// defaultTimeout is the time given to one review when the API server does
// not say (it sends ?timeout=<the webhook's timeoutSeconds>).
const defaultTimeout = 10 * time.Second

// Handler serves the mutating webhook at /mutate and health at /healthz.
func (m *Mutator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", m.serveMutate)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

func (m *Mutator) serveMutate(w http.ResponseWriter, r *http.Request) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		http.Error(w, "want Content-Type: application/json", http.StatusUnsupportedMediaType)
		return
	}
	timeout := defaultTimeout
	if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 && d < time.Minute {
		timeout = d
	}
	// Answer a little before the API server gives up on the call, so that
	// a slow registry turns into a skip with a reason rather than into the
	// failure policy.
	ctx, cancel := context.WithTimeout(r.Context(), timeout*8/10)
	defer cancel()

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("admission review over %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, status, err := m.Review(ctx, body)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// Review answers one admission.k8s.io/v1 AdmissionReview. An error (with
// the HTTP status to answer) means the review itself was malformed.
func (m *Mutator) Review(ctx context.Context, body []byte) (*admissionv1.AdmissionReview, int, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("not an AdmissionReview: %v", err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" {
		return nil, http.StatusBadRequest, fmt.Errorf("want an admission.k8s.io/v1 AdmissionReview, got %s %s", review.APIVersion, review.Kind)
	}
	req := review.Request
	if req == nil {
		return nil, http.StatusBadRequest, errors.New("AdmissionReview without a request")
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	out := &admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}

	// Anything but the creation of a Pod is let through untouched: the
	// webhook's rules should not send it, and refusing it would block the
	// cluster for a configuration mistake.
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return out, 0, nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
			Message: "rootline: the pod cannot be decoded: " + err.Error()}
		return out, 0, nil
	}
	res, err := m.Mutate(ctx, &pod, req.Namespace)
	if err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: "rootline: " + err.Error()}
		return out, 0, nil
	}
	resp.Warnings = res.Warnings
	if res.Patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
		resp.Patch = res.Patch
	}
	return out, 0, nil
}
