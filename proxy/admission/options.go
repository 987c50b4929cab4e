package admission

import (
	"time"

	"github.com/prestroid/prestroid/config"
)

// OptionsFrom maps the admission section of a configuration (defaults
// filled, validated) onto a store's options.
func OptionsFrom(a config.Admission) *Options {
	o := &Options{
		MaxQueries: a.MaxQueries, MaxCPUSeconds: a.MaxCPUSeconds,
		UserMaxQueries: a.UserMaxQueries, UserMaxCPUSeconds: a.UserMaxCPUSeconds,
		GroupMaxQueries: a.GroupMaxQueries, GroupMaxCPUSeconds: a.GroupMaxCPUSeconds,
		MaxPeakMemory: a.MaxPeakMemory.Bytes(), UserMaxPeakMemory: a.UserMaxPeakMemory.Bytes(),
		GroupMaxPeakMemory: a.GroupMaxPeakMemory.Bytes(),
		UserGroups:         a.UserGroups, GroupHeader: a.GroupHeader,
		QueueSize: a.QueueSize, MaxWait: time.Duration(a.MaxWait), IdleRelease: time.Duration(a.IdleRelease),
		MaxQueuedQueryBytes: a.MaxQueuedQueryBytes, MaxQueueBytes: a.MaxQueueBytes,
		Rate: RateLimits{UserRate: a.UserRate, UserBurst: a.UserBurst, GroupRate: a.GroupRate, GroupBurst: a.GroupBurst},
	}
	for class, v := range a.ClassMaxPeakMemory {
		if o.ClassMaxPeakMemory == nil {
			o.ClassMaxPeakMemory = map[string]float64{}
		}
		o.ClassMaxPeakMemory[class] = v.Bytes()
	}
	if a.Redis != "" {
		o.Redis = &RedisOptions{URL: a.Redis, Prefix: a.RedisPrefix, Lease: time.Duration(a.Lease), Down: a.RedisDown, Replicas: a.Replicas}
	}
	return o
}
