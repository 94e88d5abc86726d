module github.com/slidelimit/slidelimit/cmd/slidelimit

go 1.26.0

require github.com/slidelimit/slidelimit v0.0.0

replace github.com/slidelimit/slidelimit => ../..
