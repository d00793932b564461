module github.com/distopt/distopt

go 1.26
