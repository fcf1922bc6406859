module bareclaim

go 1.22
