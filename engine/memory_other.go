//go:build !linux

package engine

func systemMemory() uint64 { return 0 }

func cgroupMemory() uint64 { return 0 }

func addressSpaceLimit() uint64 { return 0 }

func addressSpaceInUse() uint64 { return 0 }
