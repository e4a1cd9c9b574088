package taildirsource

// The generators of the benchmarks' container log data, for the whole-agent
// measurement in package taildirsource_test.
var (
	BenchCRI    = benchCRI
	BenchDocker = benchDocker
)
