package nodeapi

// OwnerOrNode exposes the metrics endpoint's caller check to the tests,
// which live in package nodeapi_test.
var OwnerOrNode = ownerOrNode
