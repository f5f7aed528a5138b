package pgfence

// HealthFunctionsForTest exposes healthFunctions to the external tests.
func HealthFunctionsForTest() string { return healthFunctions }
