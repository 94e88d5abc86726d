module github.com/slidelimit/slidelimit/scripts/releasetool

go 1.26.0

require golang.org/x/mod v0.43.0
