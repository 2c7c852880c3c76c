module lockd/client

go 1.19
