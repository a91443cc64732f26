module stagehand.test/runc-oom

go 1.25
