package elasticsearchsink

// For the external tests (agent_test.go).
var (
	StartVictoriaLogs = startVictoriaLogs
	VLQuery           = vlQuery
)
