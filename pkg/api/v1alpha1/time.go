package v1alpha1

import (
	"encoding/json"
	"time"
)

// Time is a timestamp in a stored object. It encodes as RFC 3339 with as
// many fractional digits as it has (as time.Time does), and reads any RFC
// 3339 time. Kubernetes' metav1.Time would drop the fraction (a writer's
// backend start is compared to the microsecond) and Time reads
// only six digits, not the times stored before the types became custom
// resources.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:Format=date-time
type Time struct {
	time.Time `json:"-"`
}

// NewTime wraps t.
func NewTime(t time.Time) Time { return Time{t} }

// DeepCopyInto copies t into out: a time is a value.
func (t *Time) DeepCopyInto(out *Time) { *out = *t }

// MarshalJSON encodes t as time.Time does.
func (t Time) MarshalJSON() ([]byte, error) { return json.Marshal(t.Time) }

// UnmarshalJSON decodes an RFC 3339 time; null leaves t zero.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = Time{}
		return nil
	}
	return json.Unmarshal(b, &t.Time)
}

// DeepCopy returns a copy of t.
func (t *Time) DeepCopy() *Time {
	if t == nil {
		return nil
	}
	out := *t
	return &out
}
