module github.com/quorate/quorate

go 1.26
